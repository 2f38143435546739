# call 7: the first half of FlashAttention-4 (../shared/peers/fa4-wheels.sh), carry .peers/a
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/ && ls -la /tmp/fa4 && nvidia-smi -L
