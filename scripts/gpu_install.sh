# Sourced by the one-call device scripts (`source scripts/gpu_install.sh || exit 1`, from the repository root): the
# carried wheels (.whl/*.whl: meson-python and pyproject-metadata, where no index is reachable) into /tmp/site, then
# maskattn built and installed from the working tree, its log in $OUT/build.log (OUT defaults to /tmp/maskattn-gpu);
# prints the GPU's name. Exports PYTHONUNBUFFERED and CUPY_CACHE_DIR (kept across calls on a warm machine).
export OUT=${OUT:-/tmp/maskattn-gpu} PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/maskattn-cupy-cache}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! python3 -m pip install --no-build-isolation --no-deps --no-index -q . >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  return 1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
