"""Audio-like data for the Estimator example and benchmark: short 16-bit PCM WAV clips generated on
disk, read and post-processed in Python (what an Estimator user's ``input_fn`` does with
``tf.py_function``: parse the file, compute log-mel features, clean them up in Python).

The post-processing has a pure-Python part whose length is set in milliseconds per clip
(``python_ms``, calibrated on this machine), so a benchmark can set the data work per batch to a
chosen multiple of the train step.

    paths, labels = make_clips("/tmp/clips", 512)
    features, label = load_clip(paths[0], labels[0], python_ms=5.0)   # (98, 40) float32, int64
"""
import math
import os
import time
import wave
from typing import List, Tuple

import numpy as np

SAMPLE_RATE = 16000
CLIP_SECONDS = 1.0
FRAME, HOP, MEL_BINS = 400, 160, 40
FRAMES = 1 + (int(SAMPLE_RATE * CLIP_SECONDS) - FRAME) // HOP       # 98
CLASSES = 10


def make_clips(directory: str, count: int, seed: int = 0) -> Tuple[List[str], List[int]]:
    """``count`` clips (a tone whose pitch says the class, with harmonics and noise) as WAV files in
    ``directory`` (made once: existing files are reused); returns their paths and labels."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.RandomState(seed)
    paths, labels = [], []
    t = np.arange(int(SAMPLE_RATE * CLIP_SECONDS)) / SAMPLE_RATE
    for index in range(count):
        label = int(rng.randint(CLASSES))
        pitch, phase, noise = 200.0 * 1.25 ** label, rng.uniform(0, 2 * math.pi), rng.uniform(0.05, 0.3)
        path = os.path.join(directory, "clip{:05d}_{}.wav".format(index, label))
        if not os.path.exists(path):
            signal = sum(np.sin(2 * math.pi * pitch * k * t + phase) / k for k in (1, 2, 3))
            signal = signal / 2 + noise * rng.standard_normal(t.size)
            pcm = np.clip(signal * 8000, -32768, 32767).astype("<i2")
            with wave.open(path + ".part", "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(SAMPLE_RATE)
                out.writeframes(pcm.tobytes())
            os.replace(path + ".part", path)
        paths.append(path)
        labels.append(label)
    return paths, labels


def _mel_matrix() -> np.ndarray:
    """Triangular filters mapping the 201 FFT bins to MEL_BINS mel bands."""
    def to_mel(hz):
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    edges = 700.0 * (10 ** (np.linspace(to_mel(0), to_mel(SAMPLE_RATE / 2), MEL_BINS + 2) / 2595.0) - 1)
    bins = np.fft.rfftfreq(FRAME, 1.0 / SAMPLE_RATE)
    matrix = np.zeros((bins.size, MEL_BINS), np.float32)
    for m in range(MEL_BINS):
        low, mid, high = edges[m:m + 3]
        matrix[:, m] = np.clip(np.minimum((bins - low) / (mid - low), (high - bins) / (high - mid)), 0, None)
    return matrix


_MEL = _mel_matrix()
_WINDOW = np.hanning(FRAME).astype(np.float32)
_LOOPS_PER_MS = 0.0


def python_work(ms: float) -> int:
    """About ``ms`` milliseconds of pure-Python work (holds the GIL), as the per-clip clean-up of a
    real input_fn does; calibrated on first use."""
    global _LOOPS_PER_MS
    if ms <= 0:
        return 0
    if not _LOOPS_PER_MS:
        start, loops = time.thread_time(), 0
        while time.thread_time() - start < 0.05:
            loops += _spin(1000)
        _LOOPS_PER_MS = loops / ((time.thread_time() - start) * 1e3)
    return _spin(int(ms * _LOOPS_PER_MS))


def _spin(loops: int) -> int:
    total = 0
    for _ in range(loops):
        total = (total * 31 + 7) & 0xFFFF
    return loops


def load_clip(path: str, label: int, python_ms: float = 0.0) -> List[np.ndarray]:
    """Read the WAV file at ``path`` and return ``[features, label]``: per-utterance normalised
    log-mel features (FRAMES x MEL_BINS float32, zero mean and unit variance over the clip) and the label (int64), after ``python_ms`` of
    Python clean-up work."""
    with wave.open(path, "rb") as clip:
        samples = np.frombuffer(clip.readframes(clip.getnframes()), "<i2").astype(np.float32) / 32768.0
    emphasised = np.append(samples[0], samples[1:] - 0.97 * samples[:-1])
    frames = np.lib.stride_tricks.as_strided(
        emphasised, (FRAMES, FRAME), (emphasised.strides[0] * HOP, emphasised.strides[0]))
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=1)) ** 2
    features = np.log(power.astype(np.float32) @ _MEL + 1e-6)
    features = (features - features.mean()) / (features.std() + 1e-5)
    python_work(python_ms)
    return [features.astype(np.float32), np.int64(label)]
