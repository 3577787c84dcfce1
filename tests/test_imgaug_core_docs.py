"""The code in docs/image_augmentation.md runs, in order, and its assertions hold."""
import re
import sys
from pathlib import Path

import pytest

from fresh_python import run_python

pytest.importorskip("cv2")

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "image_augmentation.md"


def test_image_augmentation_page_code_runs():
    found = re.findall(r"(<!-- not run[^\n]*-->\n)?```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    blocks = [code for marker, code in found if not marker]      # a block marked "not run" needs a dataset
    assert len(blocks) == 12 and len(found) == 13
    proc = run_python([sys.executable, "-c", "\n".join(blocks)], cwd=str(REPO), capture_output=True,
                      text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_page_lists_every_augmentor():
    from inputpipe.dataflow import imgaug

    text = PAGE.read_text(encoding="utf-8")
    augmentors = [name for name in imgaug.__all__ if isinstance(getattr(imgaug, name), type)
                  and issubclass(getattr(imgaug, name), imgaug.ImageAugmentor)
                  and name not in ("Augmentor", "ImageAugmentor", "PhotometricAugmentor")]
    missing = [name for name in augmentors if "`{}(".format(name) not in text]
    assert missing == []
