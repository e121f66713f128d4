#!/usr/bin/env bash
# A new user's install, checked: build the wheel, check its metadata as an index would render it (twine check),
# install it (no extras) in a fresh venv at the OLDEST releases pyproject.toml admits (constraints/lower-bounds.txt),
# run the console script's quick start outside the repository, run a paper table by name from an empty folder
# (`raytune-fl reproduce`), then the lower-bounds test subset against those releases. CI runs this after the main
# tiers (~5 min).
#
#   tools/fresh_install.sh [VENV_DIR]     (default: a temporary directory, removed at the end)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
venv="${1:-$scratch/venv}"
trap 'rm -rf "$scratch"' EXIT

# this workplace keeps older torch wheels on disk; elsewhere pip takes them from PyPI
links=()
if [ -d /opt/pypi-more/files ]; then links=(--find-links /opt/pypi-more/files); fi

start=$SECONDS
python -m build --wheel --outdir "$scratch/dist" "$repo" >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
rm -rf "$repo/build"  # setuptools' staging folder
# its metadata (the README as long description) renders: what `twine upload` would refuse, refused here
python -m twine check --strict "$scratch"/dist/raytune_fl-*.whl
python -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "${links[@]}" \
  -c "$repo/constraints/lower-bounds.txt" "$scratch"/dist/raytune_fl-*.whl pytest
echo "fresh venv with the wheel at the lower bounds: $((SECONDS - start)) s"
"$venv/bin/pip" list --disable-pip-version-check 2>/dev/null |
  grep -i -E '^(torch|torchvision|ray|optuna|mlflow|pyarrow|pandas|numpy|pydantic|raytune-fl) ' | tr -s ' ' | paste -sd, -

# the quick start as the README gives it, from a folder that is not the repository (the wheel's code, not the tree's)
mkdir "$scratch/user" && cp "$repo/search_spaces/quickstart.yaml" "$scratch/user/"
(cd "$scratch/user" && "$venv/bin/raytune-fl" --version &&
  "$venv/bin/raytune-fl" tune --space quickstart.yaml --rounds 2 --num-samples 1 >run.log 2>&1) ||
  { tail -40 "$scratch/user/run.log"; exit 1; }
grep -q "best configuration per variant" "$scratch/user/run.log"
echo "quick start from the wheel: ok ($((SECONDS - start)) s)"

# a paper table by name from an empty folder: its space file is the wheel's package data. The smallest honest run:
# fedld_table2 (the fewest variants), one round, one trial per searched variant, one seed at one alpha (~45 s)
step=$SECONDS
mkdir "$scratch/paper"
(cd "$scratch/paper" && "$venv/bin/raytune-fl" reproduce fedld_table2 --rounds 1 --num-samples 1 --seeds 1 \
  --alphas 0.1 --no-screenshot --out results --work work >run.log 2>&1 &&
  grep -q "^## Final-round test accuracy" results/fedld_table2.md) || { tail -40 "$scratch/paper/run.log"; exit 1; }
echo "reproduce fedld_table2 from the wheel: ok ($((SECONDS - step)) s)"

# at the lower bounds: the unit tier of the engine, every method and aggregator, the data, models, config and
# export (the torch, numpy, pandas, pydantic and MLflow calls), then one study end to end on Ray actors (Ray, Tune,
# Optuna). The fast tier's Ray studies run at the current releases only: they repeat these calls at ten times the
# cost, and CI's time is bounded
cd "$repo"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -o addopts="" -m unit \
  tests/engine tests/methods tests/aggregators tests/conformance tests/data tests/models tests/config \
  tests/export | tail -3
"$venv/bin/python" -m pytest -q -p no:cacheprovider -o addopts="-m 'not slow'" tests/tune/test_study.py | tail -3
echo "fresh install checked in $((SECONDS - start)) s"
