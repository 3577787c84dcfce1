"""Image DataFlows: read image files, and augment image (and coordinate) components of datapoints.

The augmenting flows run an :class:`~inputpipe.dataflow.imgaug.AugmentorList` on each datapoint:
one transform is drawn from the first image and applied to every listed image and coordinate
array, so an image, its mask and its keypoints stay aligned. ``reset_state()`` resets the
augmentors too, so every worker process draws its own random transforms.

Example::

    import numpy as np
    from inputpipe.dataflow import AugmentImageComponent, DataFromList, imgaug
    df = DataFromList([[np.zeros((8, 8, 3), "uint8"), 1]], shuffle=False)
    df = AugmentImageComponent(df, [imgaug.Flip(horiz=True)])
    df.reset_state()
    image, label = next(iter(df))
"""
import contextlib
import copy as copy_module
import os
from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..utils.logger import get_logger
from ._core.helpers import EpochCursor, indexed_epoch, indexed_state, check_indexed
from ._core.state import SEED, StatePlan, check_input_state
from .base import DataFlow, RNGDataFlow, check_state, require_rng
from .seeding import datapoint_context, datapoint_seed, derive_seed, new_rng
from .common import MapData, MapDataComponent
from .image_damage import check_image_file_damage
from .image_limits import check_image_file
from .tensorpack_helpers import shape2d  # noqa: F401  (tensorpack's dataflow.image has it, outside __all__)

__all__ = ["ImageFromFile", "AugmentImageComponent", "AugmentImageCoordinates", "AugmentImageComponents"]

logger = get_logger(__name__)

# A failing datapoint is logged with its traceback while there are few failures, then every
# this many failures (the count is always in the message).
_LOG_EVERY_N_ERRORS = 100
_LOG_FIRST_N_ERRORS = 10


def _import_cv2(component: str) -> Any:
    from ._image.opencv import import_cv2  # the imgaug package is imported on first use only

    return import_cv2(component)


def _augmentor_list(augmentors: Any) -> Any:
    """``augmentors`` itself when it is an AugmentorList, else an AugmentorList of the given list."""
    from .imgaug import AugmentorList

    if isinstance(augmentors, AugmentorList):
        return augmentors
    return AugmentorList(augmentors)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "an array of shape {} and dtype {}".format(value.shape, value.dtype)
    return "a {}".format(type(value).__name__)


def _image_input(owner: str, key: Hashable, image: Any) -> Any:
    """The image component to augment. An HW or HWC numpy array of any numeric dtype (tensorpack's
    check meant to refuse integer images other than uint8 but never did; inputpipe keeps
    accepting them), or the encoded bytes of an image file (``bytes`` or a 1-d uint8 array), as
    an :class:`~inputpipe.dataflow.imgaug.encoded.EncodedImage` that the augmentors decode only
    as far as they need."""
    from .imgaug.base import check_image
    from .imgaug.encoded import as_encoded, is_encoded

    component = "{} (component {!r})".format(owner, key)
    if is_encoded(image):
        return as_encoded(image, component)
    check_image(component, image)
    return image


def _decoded(image: Any) -> Any:
    """The pixels of an augmented image (an encoded one that no augmentor decoded is decoded now)."""
    from .imgaug.encoded import decoded

    return decoded(image)


def _check_coords(owner: str, key: Hashable, coords: Any) -> None:
    """Coordinates must be a float array of shape (N, 2), each row (x, y)."""
    if not isinstance(coords, np.ndarray) or coords.ndim != 2 or coords.shape[1] != 2 \
            or not np.issubdtype(coords.dtype, np.floating):
        raise ValueError("{}: coordinates component {!r} must be a floating point array of shape "
                         "(N, 2) with rows (x, y), got {}".format(owner, key, _describe(coords)))


def _as_mutable(dp: Any) -> Any:
    """A datapoint whose components can be replaced: a tuple becomes a list (MapData already gave
    a shallow copy of lists and dicts)."""
    return list(dp) if isinstance(dp, tuple) else dp


class _FailurePolicy:
    """Counts augmentation failures; with ``catch_exceptions`` a failure skips the datapoint and
    is logged (rate-limited) instead of raised."""

    def __init__(self, owner: str, catch_exceptions: bool):
        self.owner = owner
        self.catch_exceptions = bool(catch_exceptions)
        self.failures = 0

    def failed(self, err: Exception) -> None:
        """Called from an ``except`` block: re-raises ``err`` unless failures are caught."""
        self.failures += 1
        if not self.catch_exceptions:
            raise err
        if self.failures < _LOG_FIRST_N_ERRORS or self.failures % _LOG_EVERY_N_ERRORS == 0:
            logger.warning("%s: skipped a datapoint whose augmentation failed (%d failure%s so far): "
                           "%s: %s", self.owner, self.failures, "" if self.failures == 1 else "s",
                           type(err).__name__, err, exc_info=True)


# tensorpack's dataflow.image also has check_dtype, validate_coords, ExceptionHandler and
# AugmentorList (outside __all__); these are the checks and the failure policy of the flows below
# (check_dtype and AugmentorList come from the imgaug package, see __getattr__).

def validate_coords(coords: Any) -> None:
    """Raise ``ValueError`` unless ``coords`` is a floating point array of shape (N, 2), rows (x, y).

    Example::

        validate_coords(np.array([[0.5, 2.0]], np.float32))
    """
    _check_coords("validate_coords", "coords", coords)


class ExceptionHandler:
    """The failure policy of the augmenting flows, as tensorpack's helper: run each datapoint's
    augmentation in ``with handler.catch():``; an exception is raised, or, with
    ``catch_exceptions=True``, counted (``failures``), logged (the first 10, then every 100th)
    and the rest of the block skipped.

    Example::

        handler = ExceptionHandler(catch_exceptions=True)
        with handler.catch():
            image = augmentors.augment(image)
    """

    def __init__(self, catch_exceptions: bool = False):
        self._policy = _FailurePolicy("ExceptionHandler", catch_exceptions)

    @property
    def catch_exceptions(self) -> bool:
        return self._policy.catch_exceptions

    @property
    def failures(self) -> int:
        return self._policy.failures

    @contextlib.contextmanager
    def catch(self) -> Iterator[None]:
        try:
            yield
        except Exception as err:
            self._policy.failed(err)


def __getattr__(name: str) -> Any:
    """``AugmentorList`` and ``check_dtype`` (tensorpack's dataflow.image has them) come from the
    imgaug package, which is imported on first use so that importing the DataFlow core stays fast."""
    if name == "AugmentorList":
        from .imgaug import AugmentorList

        return AugmentorList
    if name == "check_dtype":
        from .imgaug.base import check_dtype

        return check_dtype
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))


class _SeededAugmentation:
    """What the augmenting flows share: datapoint ``n`` (counted from ``reset_state()``) is augmented
    inside ``datapoint_context(derive_seed(base seed, n))`` by ``_augment_one``, so the augmentors'
    random draws are a function of the flow's state; inside a parallel map's context (which already
    seeds the datapoint) nothing is added. Mixed in before ``MapData``; subclasses set ``augs``."""

    ds: DataFlow
    augs: Any
    _base_seed: Optional[int] = None
    _count = 0

    def reset_state(self) -> None:
        self.ds.reset_state()
        self.augs.reset_state()
        self._base_seed, self._count = int(new_rng(self).randint(0, 2 ** 32, dtype=np.int64)), 0

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input", "seed", "count"}``."""
        return {"type": type(self).__name__, "input": self.ds.get_state(), "seed": self._base_seed,
                "count": self._count}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"input": dict, "seed": SEED, "count": int})
        check_input_state(self, self.ds, state["input"], plan)

        def restore() -> None:
            self._base_seed, self._count = state["seed"], state["count"]
        plan.then(restore)

    def _augment(self, value: Any) -> Any:
        if self._base_seed is None:
            raise RuntimeError("{} has no RNG yet: call reset_state() once before iterating it".format(
                type(self).__name__))
        number, self._count = self._count, self._count + 1
        context = contextlib.nullcontext() if datapoint_seed() is not None else datapoint_context(
            derive_seed(self._base_seed, number))
        with context:
            return self._augment_one(value)

    def _augment_one(self, value: Any) -> Any:
        raise NotImplementedError


class AugmentImageComponent(_SeededAugmentation, MapDataComponent):
    """Augment one image component (``index``: list index or dict key) of every datapoint.

    ``augmentors`` is a list of :class:`~inputpipe.dataflow.imgaug.ImageAugmentor` (wrapped in an
    ``AugmentorList``) or an ``AugmentorList``. With ``copy=True`` (default) the augmentors get
    a copy of the image, so augmentors that work in place cannot change the input flow's data.
    With ``catch_exceptions=True`` a datapoint whose augmentation raises is skipped and a
    rate-limited warning is logged; otherwise the exception propagates. A datapoint whose
    augmentation returns None is skipped too. The component must be a numpy array (checked even
    with ``catch_exceptions``, as in tensorpack).

    Resuming: datapoint ``n`` after ``reset_state()`` is augmented inside its own seed context,
    derived from (this flow's base seed, ``n``), which every augmentor's ``rng`` draws from; the
    state is the input's state, the base seed and ``n``, so a restored flow draws the same
    augmentations (inside a parallel map, the map's per-datapoint seed is used instead).

    Example::

        import numpy as np
        from inputpipe.dataflow import AugmentImageComponent, DataFromList, imgaug
        df = DataFromList([[np.arange(12, dtype="uint8").reshape(2, 2, 3), 7]], shuffle=False)
        df = AugmentImageComponent(df, [imgaug.Flip(horiz=True, prob=1.0)])
        df.reset_state()
        image, label = next(iter(df))     # the image mirrored left-right, label 7
    """

    def __init__(self, ds: DataFlow, augmentors: Any, index: Hashable = 0, copy: bool = True,
                 catch_exceptions: bool = False):
        self.augs = _augmentor_list(augmentors)
        self._copy = copy
        self._failures = _FailurePolicy(type(self).__name__, catch_exceptions)
        super().__init__(ds, self._augment, index)

    def _augment_one(self, image: Any) -> Any:
        image = _image_input(type(self).__name__, self._index, image)
        try:
            if self._copy and isinstance(image, np.ndarray):
                image = copy_module.deepcopy(image)
            return self.augs.augment(image)
        except Exception as err:  # noqa: BLE001 - the policy re-raises unless asked to skip
            self._failures.failed(err)
            return None


class AugmentImageCoordinates(_SeededAugmentation, MapData):
    """Augment an image and an array of coordinates of every datapoint with the same transform.

    The coordinates (component ``coords_index``) must be a floating point array of shape (N, 2)
    whose rows are (x, y); the transform is drawn from the image (component ``img_index``).
    ``copy`` and ``catch_exceptions`` are as in :class:`AugmentImageComponent`; here the checks
    of the image and the coordinates count as augmentation failures (caught when asked, as in
    tensorpack).

    Resuming: datapoint ``n`` after ``reset_state()`` is augmented inside its own seed context,
    derived from (this flow's base seed, ``n``), which every augmentor's ``rng`` draws from; the
    state is the input's state, the base seed and ``n``, so a restored flow draws the same
    augmentations (inside a parallel map, the map's per-datapoint seed is used instead).

    Example::

        import numpy as np
        from inputpipe.dataflow import AugmentImageCoordinates, DataFromList, imgaug
        image = np.zeros((4, 6, 3), "uint8")
        points = np.array([[1.0, 2.0]], dtype="float32")
        df = AugmentImageCoordinates(DataFromList([[image, points]], shuffle=False),
                                     [imgaug.Flip(horiz=True, prob=1.0)])
        df.reset_state()
        image, points = next(iter(df))    # points is [[5., 2.]]: x mirrored across the width 6
    """

    def __init__(self, ds: DataFlow, augmentors: Any, img_index: Hashable = 0, coords_index: Hashable = 1,
                 copy: bool = True, catch_exceptions: bool = False):
        self.augs = _augmentor_list(augmentors)
        self._img_index = img_index
        self._coords_index = coords_index
        self._copy = copy
        self._failures = _FailurePolicy(type(self).__name__, catch_exceptions)
        super().__init__(ds, self._augment)

    def _augment_one(self, dp: Any) -> Any:
        owner = type(self).__name__
        dp = _as_mutable(dp)
        try:
            image, coords = dp[self._img_index], dp[self._coords_index]
            image = _image_input(owner, self._img_index, image)
            _check_coords(owner, self._coords_index, coords)
            if self._copy:
                image, coords = copy_module.deepcopy((image, coords))
            transform = self.augs.get_transform(image)
            dp[self._img_index] = _decoded(transform.apply_image(image))
            dp[self._coords_index] = transform.apply_coords(coords)
            return dp
        except Exception as err:  # noqa: BLE001 - the policy re-raises unless asked to skip
            self._failures.failed(err)
            return None


class AugmentImageComponents(_SeededAugmentation, MapData):
    """Augment several image components and coordinate components with one shared transform.

    The transform is drawn from the first image in ``index`` and applied to every image in
    ``index`` (e.g. an image and its segmentation mask) and to every (N, 2) float coordinate
    array in ``coords_index``. ``copy`` and ``catch_exceptions`` are as in
    :class:`AugmentImageComponent`; the checks of the components count as augmentation failures.

    Resuming: datapoint ``n`` after ``reset_state()`` is augmented inside its own seed context,
    derived from (this flow's base seed, ``n``), which every augmentor's ``rng`` draws from; the
    state is the input's state, the base seed and ``n``, so a restored flow draws the same
    augmentations (inside a parallel map, the map's per-datapoint seed is used instead).

    Example::

        import numpy as np
        from inputpipe.dataflow import AugmentImageComponents, DataFromList, imgaug
        image, mask = np.zeros((4, 6, 3), "uint8"), np.zeros((4, 6), "uint8")
        points = np.array([[1.0, 2.0]], dtype="float32")
        df = AugmentImageComponents(DataFromList([[image, mask, points]], shuffle=False),
                                    [imgaug.Flip(horiz=True, prob=1.0)],
                                    index=(0, 1), coords_index=(2,))
        df.reset_state()
        image, mask, points = next(iter(df))
    """

    def __init__(self, ds: DataFlow, augmentors: Any, index: Sequence[Hashable] = (0, 1),
                 coords_index: Sequence[Hashable] = (), copy: bool = True, catch_exceptions: bool = False):
        self.augs = _augmentor_list(augmentors)
        self._index = tuple(index)
        self._coords_index = tuple(coords_index)
        if not self._index:
            raise ValueError("AugmentImageComponents: index must name at least one image component, "
                             "got {!r}".format(index))
        self._copy = copy
        self._failures = _FailurePolicy(type(self).__name__, catch_exceptions)
        super().__init__(ds, self._augment)

    def _augment_one(self, dp: Any) -> Any:
        owner = type(self).__name__
        dp = _as_mutable(dp)
        copy_of = copy_module.deepcopy if self._copy else _same
        try:
            first = self._index[0]
            image = _image_input(owner, first, copy_of(dp[first]))
            transform = self.augs.get_transform(image)
            dp[first] = _decoded(transform.apply_image(image))
            for key in self._index[1:]:
                dp[key] = _decoded(transform.apply_image(_image_input(owner, key, copy_of(dp[key]))))
            for key in self._coords_index:
                coords = copy_of(dp[key])
                _check_coords(owner, key, coords)
                dp[key] = transform.apply_coords(coords)
            return dp
        except Exception as err:  # noqa: BLE001 - the policy re-raises unless asked to skip
            self._failures.failed(err)
            return None


def _same(value: Any) -> Any:
    return value


def _imgaug_shape2d(component: str, size: Any) -> Tuple[int, int]:
    from .imgaug.base import hw_shape

    return hw_shape(component, size)


class ImageFromFile(RNGDataFlow):
    """Datapoints ``[image]`` read from image files with OpenCV.

    ``channel=3`` gives (h, w, 3) uint8 images in RGB order (a grayscale file is expanded to three
    channels, as in tensorpack); ``channel=1`` gives (h, w, 1) grayscale images. ``resize`` (an
    int or an (h, w) pair) resizes every image with bilinear interpolation. With
    ``shuffle=True`` the files are visited in a new order every epoch: epoch ``e`` is a
    permutation of the list you passed, drawn from a RandomState seeded from (this flow's base
    seed, ``e``) (tensorpack shuffled its list in place, cumulatively). A file OpenCV cannot read
    is an ``OSError`` naming it; a file whose header declares more pixels than
    :data:`~inputpipe.dataflow.image_limits.MAX_IMAGE_PIXELS` is an ``ImageTooLargeError``, raised
    before decoding. Needs OpenCV (``pip install "inputpipe[image]"``). Its state is
    (epoch, position, number of files, base seed).

    Example::

        df = ImageFromFile(["a.png", "b.jpg"], channel=3, resize=(64, 64), shuffle=False)
        df.reset_state()
        for [image] in df:
            assert image.shape == (64, 64, 3)
    """

    def __init__(self, files: Sequence[str], channel: int = 3, resize: Optional[Union[int, Sequence[int]]] = None,
                 shuffle: bool = False):
        if not len(files):
            raise ValueError("ImageFromFile: expected a non-empty list of image files, got an empty {}"
                             .format(type(files).__name__))
        self.files: List[str] = [os.fspath(f) for f in files]
        self.channel = int(channel)
        if self.channel not in (1, 3):
            raise ValueError("ImageFromFile: channel must be 1 or 3, got {!r}".format(channel))
        self.resize = None if resize is None else _imgaug_shape2d("ImageFromFile", resize)
        self.shuffle = shuffle
        self._cursor = EpochCursor()
        _import_cv2("ImageFromFile")  # fail at construction, not in a worker, when OpenCV is missing

    def __len__(self) -> int:
        return len(self.files)

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor.reset()

    def __iter__(self) -> Iterator[List[np.ndarray]]:
        if self.shuffle:
            require_rng(self)
        order, token = indexed_epoch(self, self._cursor, len(self.files), self.shuffle)
        return self._cursor.track(self._read([self.files[i] for i in order]), token)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}``."""
        return indexed_state(self, self._cursor, len(self.files), self.shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_indexed(self, self._cursor, state, len(self.files), self.shuffle, plan)

    def _read(self, files: List[str]) -> Iterator[List[np.ndarray]]:
        cv2 = _import_cv2("ImageFromFile")
        mode = cv2.IMREAD_GRAYSCALE if self.channel == 1 else cv2.IMREAD_COLOR
        for fname in files:
            check_image_file("ImageFromFile", fname)
            check_image_file_damage("ImageFromFile", fname)
            image = cv2.imread(fname, mode)
            if image is None:
                raise OSError("ImageFromFile: cannot read the image file {!r} (it is missing, unreadable "
                              "or not in a format OpenCV decodes)".format(fname))
            if self.channel == 3:
                image = image[:, :, ::-1]
            if self.resize is not None:
                image = cv2.resize(image, (self.resize[1], self.resize[0]))
            if self.channel == 1:
                image = image[:, :, np.newaxis]
            yield [np.ascontiguousarray(image)]
