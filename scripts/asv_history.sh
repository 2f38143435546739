#!/usr/bin/env bash
# The benchmark history: install each of a list of commits in turn and record the asv suites (asv_bench/) against
# that commit's hash, on a machine with no git history and no package index (the GPU machine) as well as here.
#
#   scripts/asv_history.sh prepare [--dir D] [--gpu N | --last N | COMMIT...] [--python PY]
#       Here (git, a package index): the commit table D/commits.tsv (newest first), each commit's wheel built for
#       the target Python (D/wheels/HASH/, with its source in D/trees/ for a rebuild there), the tools the target
#       lacks (D/tools/: asv and its missing dependencies, meson-python), a bare clone for asv (D/repo.git).
#       --gpu N (default 10): the last N commits on main that changed gpu/, maskprep/ or the launch code.
#       --last N: the last N commits on main. PY: an interpreter of the target's version (default python3.12).
#   scripts/asv_history.sh run [--dir D] [--profile gpu|gpu-full|host|host-full|smoke] [--machine NAME] [--budget S]
#                              [--python PY] [--out OUT] [--skip K] [--phases 1,2,...]
#       There (or here): installs each commit's wheel into a folder of its own, runs
#       `asv run -E existing:PY --set-commit-hash HASH` over the profile's phases, newest commit first, each phase
#       over every commit before the next phase, and stops starting steps that would end past the budget (default
#       560 s from the start). After every step OUT/asv-results.tar.gz holds all results so far; OUT/asv_history.log
#       the log. OUT defaults to $OUT (the GPU machine's), else D/out. NAME defaults to the GPU (h100-sxm for an
#       H100 SXM) or dev-Ncore. --skip K leaves out the K newest commits of the table (a second run's share),
#       --phases runs only the phases listed.
#   scripts/asv_history.sh fold ARCHIVE
#       Here: merge an archive of `run` into asv_bench/results/ (per parameter set: several runs add up) and print
#       which commits and cases it holds.
#
# The GPU run, from the repository root (D = .hist carried to the machine):
#   scripts/asv_history.sh prepare && <device> bash scripts/asv_history.sh run && scripts/asv_history.sh fold ...
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIR=.hist
LAUNCH_PATHS=(gpu maskprep python/maskattn/backends 'python/maskattn/_cuda*.py')
SOURCE_PATHS=(meson.build pyproject.toml README.md maskprep gpu python)
TOOLS=(asv==0.6.6 asv_runner==0.3.2 json5==0.17.3 importlib_metadata==8.7.1 zipp==3.23.1 pympler==1.1 meson-python==0.22.1
       pyproject-metadata==0.12.1)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
           manylinux1_x86_64)

die() { echo "asv_history: $*" >&2; exit 1; }

# the phases of each profile: one line each, the asv -b regexes of one `asv run`, separated by ';'
phases() {
    case "$1" in
        gpu)  # forward at n = 16384, D = 128 for every commit first; then the rates; then what time allows
            echo '^gpu_attention\.Forward\.time_forward\(.*, 16384, 128\)$'
            echo '^gpu_attention\.Rates;^gpu_decode\.(Tree|Decode)Bandwidth\.'
            echo '^gpu_attention\.ForwardBackward\.time_forward_backward\(.*, 16384, 128\)$;^gpu_decode\.(TreeVerification|Decode)\.'
            echo '^gpu_attention\.Forward\.time_forward\(.*, (4096, (64|128)|16384, 64)\)$' ;;
        gpu-full) echo '^gpu_' ;;
        host) echo '^compile\.;^rcm\.Corpus\.' ;;
        host-full) echo '^compile\.;^rcm\.' ;;
        smoke)  # the script's own check, seconds a commit: host benchmarks, and a GPU phase (skipped without one)
            echo '^compile\.CompileDecode\.;^rcm\.Corpus\.track_tiles_rcm'
            echo '^gpu_attention\.Forward\.time_forward\(.*, 16384, 128\)$;^gpu_decode\.DecodeBandwidth' ;;
        *) die "unknown profile $1 (gpu, gpu-full, host, host-full, smoke)" ;;
    esac
}

# seconds a step of a phase is expected to take before one has been timed
first_guess() { case "$1" in host*) echo 300 ;; *) echo 75 ;; esac; }

target_python() {
    if python3.12 -c pass 2> /dev/null; then command -v python3.12; return; fi  # (a pyenv shim may fail)
    local found
    found=$(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python 2>/dev/null | tail -1)
    [[ -n "$found" ]] && echo "$found" || die "no python3.12 here: pass --python"
}

prepare() {
    local py="" select=gpu count=10 commits=()
    while (($#)); do
        case "$1" in
            --dir) DIR=$2; shift 2 ;;
            --gpu) select=gpu count=$2; shift 2 ;;
            --last) select=last count=$2; shift 2 ;;
            --python) py=$2; shift 2 ;;
            -*) die "prepare: unknown option $1" ;;
            *) commits+=("$1"); shift ;;
        esac
    done
    py=${py:-$(target_python)}
    if ((${#commits[@]} == 0)); then
        if [[ $select == gpu ]]; then
            mapfile -t commits < <(git log -n "$count" --format=%H main -- "${LAUNCH_PATHS[@]}")
        else
            mapfile -t commits < <(git log -n "$count" --format=%H main)
        fi
    fi
    local version
    version=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    mkdir -p "$DIR/wheels" "$DIR/trees" "$DIR/tools"

    # a build environment of the target's version (numpy 2.0's headers: the wheels run on any numpy 2)
    local venv="build/asv-history/venv-$version"
    if [[ ! -x "$venv/bin/meson" ]]; then
        "$py" -m venv "$venv"
        "$venv/bin/pip" install -q meson-python meson ninja Cython "numpy==2.0.*"
    fi

    : > "$DIR/commits.tsv.new"
    local c src
    for c in "${commits[@]}"; do
        c=$(git rev-parse "$c^{commit}")
        printf '%s\t%s\t%s\t%s\n' "$c" "$(git log -1 --format=%at "$c")" "$(git rev-parse "$c:gpu")" \
            "$(git log -1 --format=%s "$c" | cut -c1-100)" >> "$DIR/commits.tsv.new"
        if ! ls "$DIR/wheels/$c/"*.whl > /dev/null 2>&1; then
            echo "== building $(git log -1 --format='%h %s' "$c" | cut -c1-100)"
            git archive --format=tar.gz -o "$DIR/trees/$c.tar.gz" "$c" "${SOURCE_PATHS[@]}"
            src=$(mktemp -d)
            tar -xzf "$DIR/trees/$c.tar.gz" -C "$src"
            PATH="$ROOT/$venv/bin:$PATH" "$venv/bin/pip" wheel -q --no-deps --no-build-isolation \
                -w "$DIR/wheels/$c.tmp" "$src"
            mv "$DIR/wheels/$c.tmp" "$DIR/wheels/$c"
            rm -rf "$src"
        fi
    done
    mv "$DIR/commits.tsv.new" "$DIR/commits.tsv"

    rm -f "$DIR/tools/"*.whl
    local platform_args=()
    for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
        "${platform_args[@]}" -d "$DIR/tools" "${TOOLS[@]}"

    rm -rf "$DIR/repo.git"
    git clone -q --bare "$ROOT" "$DIR/repo.git"
    echo "prepared $(wc -l < "$DIR/commits.tsv") commits for Python $version in $DIR ($(du -sh "$DIR" | cut -f1)):"
    cut -f1,4 "$DIR/commits.tsv" | cut -c1-12,41-130
}

machine_name() {
    local gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) || true
    case "$gpu" in
        "") echo "dev-$(nproc)core" ;;
        *H100*PCIe*) echo h100-pcie ;;
        *H100*NVL*) echo h100-nvl ;;
        *H100*) echo h100-sxm ;;
        *H200*) echo h200 ;;
        *) echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia//; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//' ;;
    esac
}

run() {
    local profile="" machine="" budget=560 py=python3 out="" skip=0 only=""
    while (($#)); do
        case "$1" in
            --dir) DIR=$2; shift 2 ;;
            --profile) profile=$2; shift 2 ;;
            --machine) machine=$2; shift 2 ;;
            --budget) budget=$2; shift 2 ;;
            --python) py=$2; shift 2 ;;
            --out) out=$2; shift 2 ;;
            --skip) skip=$2; shift 2 ;;
            --phases) only=",$2,"; shift 2 ;;
            *) die "run: unknown option $1" ;;
        esac
    done
    local start=$SECONDS
    [[ -f "$DIR/commits.tsv" ]] || die "no $DIR/commits.tsv: run prepare first (and carry $DIR)"
    DIR=$(cd "$DIR" && pwd)
    out=${out:-${OUT:-$DIR/out}}
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    exec > >(tee -a "$out/asv_history.log") 2>&1
    py=$(command -v "$py")
    if [[ -z "$profile" ]]; then
        if nvidia-smi > /dev/null 2>&1; then profile=gpu; else profile=host; fi
    fi
    machine=${machine:-$(machine_name)}
    local work="${TMPDIR:-/tmp}/asv-history"
    rm -rf "$work"
    mkdir -p "$work/bin" "$work/commits"
    echo "== $(date -u +%FT%TZ) profile $profile, machine $machine, python $py, budget ${budget}s, $(nproc) cores"

    # asv and what it needs that this Python lacks
    "$py" -m pip install -q --no-index --no-deps --no-compile --target "$work/tools" "$DIR"/tools/*.whl
    export PYTHONPATH="$work/tools"
    local asv=("$py" -m asv)
    # an installed maskattn would shadow the commits' (an editable install's import hook comes first)
    if "$py" -m pip show -q maskattn > /dev/null 2>&1; then
        echo "uninstalling the maskattn installed in $py"
        "$py" -m pip uninstall -q -y maskattn
    fi
    # asv asks git for each commit's date; where git cannot answer from the bare clone (no git, or a clone it
    # refuses as owned by another user), the table answers
    local top
    top=$(head -1 "$DIR/commits.tsv" | cut -f1)
    if [[ -n "${ASV_HISTORY_FAKE_GIT:-}" ]] || ! git -C "$DIR/repo.git" rev-parse -q --verify "$top^{commit}" \
            > /dev/null 2>&1; then
        printf '#!/bin/sh\nexec "%s" "%s" "%s" "$@"\n' "$py" "$ROOT/scripts/asv_history_git.py" \
            "$DIR/commits.tsv" > "$work/bin/git"
        chmod +x "$work/bin/git"
        export PATH="$work/bin:$PATH"
        echo "git: answered from $DIR/commits.tsv"
    fi
    cat > "$work/asv.conf.json" <<EOF
{
    "version": 1,
    "project": "maskattn",
    "project_url": "https://github.com/maskattn/maskattn",
    "repo": "$DIR/repo.git",
    "branches": ["main"],
    "environment_type": "existing",
    "benchmark_dir": "$ROOT/asv_bench/benchmarks",
    "results_dir": "$work/results",
    "html_dir": "$work/html"
}
EOF
    # the machine's entry in ~/.asv-machine.json, every field written (`asv machine` leaves out those that equal
    # its defaults); the card's name leads the cpu field
    local gpu
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1) || true
    "$py" - "$machine" "$gpu" <<'PY'
import json, os, platform, sys
name, gpu = sys.argv[1:]
cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
ram = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
path = os.path.expanduser("~/.asv-machine.json")
machines = json.load(open(path)) if os.path.exists(path) else {"version": 1}
machines[name] = {"machine": name, "os": f"{platform.system()} {platform.release()}", "arch": platform.machine(),
                  "cpu": f"{gpu}; {cpu}" if gpu else cpu, "num_cpu": str(os.cpu_count()), "ram": f"{ram // 1048576} GiB"}
json.dump(machines, open(path, "w"), indent=4)
PY

    local hashes=() gputrees=()
    while IFS=$'\t' read -r hash _ gputree _; do
        hashes+=("$hash")
        gputrees+=("$gputree")
    done < "$DIR/commits.tsv"

    local phase_regexes=() regexes=() phase regex i hash took guess elapsed status args
    mapfile -t phase_regexes < <(phases "$profile")
    for phase in "${!phase_regexes[@]}"; do
        [[ -z "$only" || "$only" == *",$((phase + 1)),"* ]] || continue
        guess=$(first_guess "$profile")
        for i in "${!hashes[@]}"; do
            ((i >= skip)) || continue
            hash=${hashes[$i]}
            elapsed=$((SECONDS - start))
            if ((elapsed + guess > budget)); then
                echo "== phase $((phase + 1)): ${elapsed}s spent, a step takes about ${guess}s: stopping here"
                break 2
            fi
            install_commit "$hash" "$work" "$py" || { echo "!! ${hash:0:8} did not install: skipped"; continue; }
            elapsed=$((SECONDS - start))
            ((elapsed + guess <= budget)) || break 2
            IFS=";" read -r -a regexes <<< "${phase_regexes[$phase]}"
            args=()
            for regex in "${regexes[@]}"; do args+=(-b "$regex"); done
            echo "== phase $((phase + 1)) ${hash:0:8} ($((budget - elapsed))s left): ${phase_regexes[$phase]}"
            took=$SECONDS
            status=0
            ASV_PYTHONPATH="$work/commits/$hash:$work/tools" CUPY_CACHE_DIR="$work/cupy/${gputrees[$i]}" \
                timeout --signal=INT --kill-after=10 "$((budget - elapsed))" \
                "${asv[@]}" run --config "$work/asv.conf.json" -E "existing:$py" --set-commit-hash "$hash" \
                --machine "$machine" --launch-method forkserver --show-stderr "${args[@]}" || status=$?
            took=$((SECONDS - took))
            guess=$((took + took / 4 + 5))
            echo "== phase $((phase + 1)) ${hash:0:8}: ${took}s, asv exit $status"
            tar -czf "$out/asv-results.tar.gz.tmp" -C "$work" results && \
                mv "$out/asv-results.tar.gz.tmp" "$out/asv-results.tar.gz"
        done
    done
    echo "== $(date -u +%FT%TZ) done in $((SECONDS - start))s: $out/asv-results.tar.gz"
}

# install a commit's wheel into a folder of its own (once per run), or build it from its tree where the wheel does
# not import here; the check imports it as the benchmarks will
install_commit() {
    local hash=$1 work=$2 py=$3 target="$2/commits/$1"
    [[ -f "$target/.ok" ]] && return 0
    rm -rf "$target"
    "$py" -m pip install -q --no-index --no-deps --no-compile --target "$target" "$DIR/wheels/$hash/"*.whl || true
    if ! PYTHONPATH="$target" "$py" -c "import maskattn._maskprep.plan, maskattn._maskprep.rcm" 2> /dev/null; then
        echo "-- ${hash:0:8}: the prepared wheel does not import here; building it from its tree"
        local src="$work/src/$hash"
        rm -rf "$target" "$src"
        mkdir -p "$src"
        tar -xzf "$DIR/trees/$hash.tar.gz" -C "$src"
        (PATH="$(dirname "$py"):$PATH" PYTHONPATH="$work/tools" "$py" -m pip wheel -q --no-deps --no-build-isolation --no-index \
            -w "$work/built/$hash" "$src") || return 1
        "$py" -m pip install -q --no-index --no-deps --no-compile --target "$target" "$work/built/$hash/"*.whl
    fi
    local where
    where=$(cd /tmp && PYTHONPATH="$target" "$py" -c "import maskattn; print(maskattn.__file__)") || return 1
    [[ "$where" == "$target"/* ]] || { echo "!! maskattn imports from $where, not $target"; return 1; }
    touch "$target/.ok"
}

fold() {
    (($# == 1)) || die "fold ARCHIVE"
    local tmp
    tmp=$(mktemp -d)
    tar -xzf "$1" -C "$tmp"
    python3 scripts/asv_history_results.py fold "$tmp/results" asv_bench/results
    rm -rf "$tmp"
}

case "${1:-}" in
    prepare) shift; prepare "$@" ;;
    run) shift; run "$@" ;;
    fold) shift; fold "$@" ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d'; exit 2 ;;
esac
