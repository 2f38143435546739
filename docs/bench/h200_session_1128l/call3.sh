# (l) call 3 (nvidia-h200), carry .peers/a: the first half of FlashAttention-4's wheels (../shared/peers/fa4-wheels.sh)
mkdir -p /tmp/fa4 && cp .peers/a/* /tmp/fa4/ && ls -la /tmp/fa4
