"""Machinery of the image modules (private): the lazy OpenCV import and libjpeg-turbo's decoder,
shared by :mod:`inputpipe.dataflow.imgaug`, :mod:`inputpipe.dataflow.image`,
:mod:`inputpipe.dataflow.image_damage` and the dataset readers."""
