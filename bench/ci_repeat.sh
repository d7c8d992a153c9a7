#!/usr/bin/env bash
# Run a test tier N times; a table of each test's passes and failures (bench/ci_repeat.py).
#   bench/ci_repeat.sh 5 -m llamacpp
#   bench/ci_repeat.sh 3 --load -q
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python bench/ci_repeat.py "$@"
