#!/usr/bin/env bash
# The checks for a lent GPU machine (issue 51), as one command of at most 8 minutes:
#   1. install what the machine's image lacks, from wheels carried in .whl/ (it reaches no index);
#   2. `ppo_breakout` end to end, rlrun beside SB3 (CleanRL where EnvPool imports) at 16/64/128
#      copies (tests/benchmarks/device.py), at most 4.5 minutes;
#   3. tests/test_gpu.py (exact resumes on the GPU), at most 2.5 minutes.
# Each part prints its figures even when another fails; the exit status is the worst part's.
#
# Here, once, with a package index (the wheels for the machine's Python 3.12, in .whl/, which
# .git/info/exclude must ignore; about 40 MB):
#   bash tests/benchmarks/device.sh --prepare
# There, through the device tool, carrying .whl:
#   bash tests/benchmarks/device.sh            (or --quick: a CPU dry run with tiny budgets)
set -u
cd "$(dirname "$0")/../.."

# name==version, as this checkout's environment has them; the image holds torch, numpy, rich,
# opencv, cloudpickle, shellingham, markupsafe, pytest and pytest-xdist already.
PACKAGES="gymnasium==1.4.0 farama-notifications==0.0.6 ale-py==0.12.1 box2d==2.3.10 mujoco==4.0.1
mujoco-core==4.0.1 mujoco-studio==4.0.1 pyopengl glfw==2.11.0 stable-baselines3==2.9.2
sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 pydantic==2.14.4 pydantic-core==2.50.5
annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 typer==0.28.0 annotated-doc"

if [ "${1:-}" = "--prepare" ]; then
    mkdir -p .whl
    exclude="$(git rev-parse --git-common-dir)/info/exclude"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
    for package in $PACKAGES; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$package" \
            || echo "prepare: no wheel of $package"
    done
    du -sh .whl
    exit 0
fi

QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
python=python3
command -v python3 >/dev/null || python=python

echo "== machine"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
echo "cores: $(nproc)"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    echo "== install (from .whl)"
    if timeout 120 $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl; then
        export PYTHONPATH="/tmp/site:$PYTHONPATH"
    else
        echo "install failed"; status=1
    fi
else
    echo "== install: no .whl here; using what this Python has"
fi
$python -c "import torch, gymnasium, ale_py, rlrun; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'gymnasium', gymnasium.__version__, 'ale-py', ale_py.__version__)" || status=1

echo "== ppo_breakout end to end (tests/benchmarks/device.py)"
timeout 270 $python tests/benchmarks/device.py $QUICK --timeout 120 || { echo "device.py: exit $?"; status=1; }

echo "== tests/test_gpu.py"
if [ -z "$QUICK" ]; then
    timeout 150 $python -m pytest tests/test_gpu.py -q -p no:cacheprovider -n 4 || { echo "test_gpu: exit $?"; status=1; }
else
    echo "skipped with --quick"
fi
exit $status
