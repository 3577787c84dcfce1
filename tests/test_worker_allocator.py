"""Worker processes reuse freed memory for large per-datapoint arrays (glibc's mmap threshold)."""
import resource
import subprocess
import sys

import numpy as np
import pytest

from inputpipe.dataflow import DataFlow, MultiProcessRunnerZMQ

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")


class PageFaultsOfAugmentation(DataFlow):
    """One datapoint: the minor page faults per image of 40 ResNet-style augmentations (crop and
    resize, colour jitter in random order, flip) of a 256x256 image, after 5 to warm up."""

    def __len__(self):
        return 1

    def __iter__(self):
        from inputpipe.dataflow import imgaug

        augs = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(), imgaug.RandomOrderAug([
            imgaug.BrightnessScale((0.6, 1.4)), imgaug.Contrast((0.6, 1.4)), imgaug.Saturation(0.4)]),
            imgaug.Flip(horiz=True)])
        image = (np.random.RandomState(0).rand(256, 256, 3) * 255).astype(np.uint8)
        for _ in range(5):
            augs.augment(image)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(40):
            augs.augment(image)
        yield [np.float64((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40)]


def _faults_in_a_worker():
    # spawn: a fresh interpreter, whose allocator starts from glibc's defaults (a forked worker
    # inherits whatever thresholds the test process's own allocations have moved glibc to)
    df = MultiProcessRunnerZMQ(PageFaultsOfAugmentation(), num_proc=1, start_method="spawn")
    df.reset_state()
    with df:
        return float(next(iter(df))[0])


@pytest.mark.timeout(60)
def test_workers_reuse_freed_memory_instead_of_faulting_it_in_for_every_image(monkeypatch):
    pytest.importorskip("cv2")
    tuned = _faults_in_a_worker()
    monkeypatch.setenv("INPUTPIPE_WORKER_MALLOC", "0")
    untuned = _faults_in_a_worker()
    # glibc untuned: the image-sized temporaries are mapped and unmapped again for every image
    # (about 750 page faults per image measured); tuned, their memory is reused (none).
    assert untuned > 200, untuned
    assert tuned < 20, tuned


@pytest.mark.timeout(60)
@pytest.mark.parametrize("env,expected", [({}, "True"), ({"INPUTPIPE_WORKER_MALLOC": "0"}, "False"),
                                          ({"MALLOC_MMAP_THRESHOLD_": "65536"}, "False")])
def test_the_user_s_choice_wins(env, expected):
    code = "from inputpipe.utils.allocator import tune_worker_allocator; print(tune_worker_allocator())"
    clean = {k: v for k, v in __import__("os").environ.items()
             if k not in ("INPUTPIPE_WORKER_MALLOC", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    done = subprocess.run([sys.executable, "-c", code], env=dict(clean, **env), capture_output=True, text=True,
                          timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
