"""Packaging for inputpipe: hide data-preparation latency in TF1-style graph training."""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version() -> str:
    namespace = {}
    with open(os.path.join(HERE, "inputpipe", "_version.py"), encoding="utf-8") as f:
        exec(f.read(), namespace)
    return namespace["__version__"]


TEST_REQUIRES = [
    "pytest>=7",
    "pytest-timeout>=2.1",
    "psutil>=5.9",
    "pillow>=9",
    "lmdb>=1.3",
    "h5py>=3",
    "opencv-python-headless>=4.5",
    "hypothesis>=6",
    "sphinx>=7",
    "myst-parser>=2",
]

setup(
    name="inputpipe",
    version=read_version(),
    description="Python input pipelines that keep TF1-style graph training from waiting for data",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["inputpipe", "inputpipe.*"]),
    install_requires=[
        "numpy>=1.21",
        "pyzmq>=22",
        "msgpack>=1.0",
        "tabulate>=0.8",
        "tqdm>=4.50",
    ],
    extras_require={
        "tf": ["tensorflow>=2.12"],
        "tf-cpu": ["tensorflow-cpu>=2.12"],
        "lmdb": ["lmdb>=1.3"],
        "image": ["opencv-python-headless>=4.5", "pillow>=9"],
        "hdf5": ["h5py>=3"],
        "docs": ["sphinx>=7", "myst-parser>=2"],
        "test": TEST_REQUIRES,
        # Peers measured by benchmarks/ in the same run. torch 2.13.0 is pinned so that
        # the CPU wheel is used instead of the multi-GB CUDA build.
        "bench": ["torch==2.13.0", "tensorpack==0.11", "msgpack-numpy>=0.4", "pillow>=9", "psutil>=5.9"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: MIT License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
