#!/usr/bin/env bash
# tensorpack 0.11 next to inputpipe (issue 33): tensorpack's trainer with inputpipe's data side.
#
#   .ci/tensorpack.sh install VENV [PYTHON]   make VENV: TensorFlow 2.15, numpy 1.x, tensorpack 0.11
#   .ci/tensorpack.sh test VENV               run the tensorpack tests in it
#
# Its own environment because tensorpack's layers are built on tf.compat.v1.layers, which Keras 3
# (TensorFlow 2.16 and later) removed: TF 2.15 is the newest stack its examples train on.
# tests/test_tensorpack_trainer.py runs there (its slow tests are subprocesses, so two workers share
# its tests); the tensorpack-protocol tests of the main suite run again with tensorpack imported, so
# that their sources answer tensorpack's callback protocol too.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?usage: .ci/tensorpack.sh install|test VENV [PYTHON]}
venv=${2:?usage: .ci/tensorpack.sh install|test VENV [PYTHON]}

case "$action" in
install)
    "${3:-python3.11}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q -e . "tensorflow-cpu==2.15.*" "numpy<2" "tensorpack==0.11" \
        "opencv-python-headless>=4.5" pytest pytest-timeout pytest-xdist psutil hypothesis
    ;;
test)
    status=0
    "$venv/bin/python" -m pytest -n 2 --dist load tests/test_tensorpack_trainer.py || status=1
    "$venv/bin/python" -c 'import sys, pytest, tensorpack; sys.exit(pytest.main(sys.argv[1:]))' -n 0 \
        tests/test_input_source_tensorpack_protocol.py tests/test_input_source_tensorpack_names.py || status=1
    exit $status
    ;;
*)
    echo "usage: .ci/tensorpack.sh install|test VENV [PYTHON]" >&2
    exit 2
    ;;
esac
