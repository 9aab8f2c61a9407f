#!/usr/bin/env bash
# A copy of HEAD with the demo pipeline's hot modules compiled by Cython (pure-Python mode, no
# type declarations): what compiling the Python as it is buys, without a rewrite (issue 16).
#
#   bash benchmarks/cython_copy.sh /tmp/cy
#   PYTHONPATH=/tmp/cy .venv/bin/python /tmp/cy/benchmarks/profile_pipeline.py --n 1000 --no-profile
#   .venv/bin/python benchmarks/profile_pipeline.py --n 1000 --no-profile      # HEAD, alternately
#
# Cython goes into DEST/.cython (pip --target), not into the venv; gcc and Python's headers
# are needed. annotation_typing=False: Cython would otherwise enforce `dict[...]` annotations
# as exact dicts and reject a defaultdict.
set -euo pipefail
dest=${1:?usage: cython_copy.sh DEST}
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
rm -rf "$dest" && mkdir -p "$dest"
git -C "$root" archive HEAD | tar -x -C "$dest"
"$python" -m pip install -q --target "$dest/.cython" cython
cd "$dest"
modules=$(ls mutators/*.py datagen/envs/*.py critics/*.py datagen/pipeline/stages/*.py \
    datagen/{rows,preferences,chat,spans,types,tasks}.py datagen/pipeline/{chunk,shards}.py \
    datagen/teachers/{oracle,base}.py | grep -v __init__)
include=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$python" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
compiled=0
for module in $modules; do
    if PYTHONPATH="$dest/.cython" "$python" -m cython -3 -X annotation_typing=False \
            "$module" >/dev/null 2>&1; then
        compiled=$((compiled + 1))
    else
        echo "not compiled (Cython refused it): $module"
        rm -f "${module%.py}.c"
    fi
done
for module in $modules; do [ -f "${module%.py}.c" ] && echo "${module%.py}"; done \
    | xargs -P "$(nproc)" -I{} gcc -shared -fPIC -O2 -w -I"$include" -o "{}$suffix" "{}.c"
echo "$compiled modules compiled into $dest (PYTHONPATH=$dest picks them before the .py files)"
