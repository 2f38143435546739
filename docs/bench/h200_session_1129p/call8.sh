# (p) call 8 (nvidia-h200, warm; carry the two wheels): the tail split against none at D = 128 again, five rounds
# (call 7's bench read full 1.07x FA4 where (n) read 1.05x; this says whether the split is the cause).
source scripts/gpu_install.sh > /dev/null 2>&1 || exit 1; timeout 80 python3 scripts/tiles_ab.py --head-dim 128 --tiles 128x128 --n 16384 --unsplit --rounds 5 --workloads full causal
