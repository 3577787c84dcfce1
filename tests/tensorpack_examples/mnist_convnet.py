#!/usr/bin/env python
"""tensorpack's examples/basics/mnist-convnet.py with only its data side imported from inputpipe.

The model (tensorpack's layers), the trainer, ``TrainConfig``, ``ModelSaver`` and
``InferenceRunner`` are tensorpack's, as in the example; the MNIST reader, ``BatchData`` and the
InputSources come from inputpipe. Smaller than the example (8 filters, batches of 8, MNIST files
that the test writes) so that a run takes seconds. Prints one ``RESULT {json}`` line: the image ids
each step trained on (pixel (0, 0) of image ``i`` is ``i``), the labels of each inference pass,
the global step.

Usage::

    python mnist_convnet.py --data DIR --logdir DIR [--trainer simple|queue] \\
        [--input dataflow|queue|queue-worker|feed|tensorpack-staging] [--epochs 2] [--steps-per-epoch N] \\
        [--load CHECKPOINT] [--fail-after N]
"""
import argparse

import numpy as np
import tensorflow as tf
import tensorpack
from tensorpack import *  # noqa: F401,F403  (as the example: everything of tensorpack's ...)
from tensorpack import (Conv2D, InferenceRunner, LinearWrap, ModelDesc, ModelSaver, QueueInputTrainer,
                        ScalarStats, SaverRestore, SimpleTrainer, TrainConfig, argscope, launch_train_with_config)
from tensorpack.tfutils import summary
from tensorpack.tfutils.sessinit import ChainInit

# ... and the data side from inputpipe: the only lines that differ from a tensorpack script
from inputpipe.dataflow import BatchData, MapData, dataset
from inputpipe.input_source import FeedInput, QueueInput

from recorders import InferenceRecorder, InputRecorder, RestoreInputPosition, report

IMAGE_SIZE = 28
BATCH = 8


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, IMAGE_SIZE, IMAGE_SIZE), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        tf.identity(tf.cast(tf.round(image[:, 0, 0] * 255), tf.int32), name='image_id')
        image = tf.expand_dims(image * 2 - 1, 3)
        with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu, filters=8):
            logits = (LinearWrap(image)
                      .Conv2D('conv0')
                      .MaxPooling('pool0', 2)
                      .Conv2D('conv1')
                      .MaxPooling('pool1', 2)
                      .FullyConnected('fc0', 32, activation=tf.nn.relu)
                      .Dropout('dropout', rate=0.5)
                      .FullyConnected('fc1', 10, activation=tf.identity)())
        cost = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label)
        cost = tf.reduce_mean(cost, name='cross_entropy_loss')
        correct = tf.cast(tf.nn.in_top_k(predictions=logits, targets=label, k=1), tf.float32, name='correct')
        accuracy = tf.reduce_mean(correct, name='accuracy')
        summary.add_moving_summary(cost, accuracy)
        return cost

    def optimizer(self):
        return tf.compat.v1.train.AdamOptimizer(1e-3)


def get_data(directory, fail_after=None):
    train = dataset.Mnist('train', shuffle=False, dir=directory)
    if fail_after is not None:          # for the test: the DataFlow raises at datapoint `fail_after`
        train = MapData(train, lambda dp: _fail_at(dp, fail_after))
    train = BatchData(train, BATCH)
    test = BatchData(dataset.Mnist('test', dir=directory), 4, remainder=True)
    return train, test


def _fail_at(datapoint, index):
    if round(float(datapoint[0][0, 0]) * 255) == index:
        raise KeyError('image {} is missing'.format(index))
    return datapoint


def get_config(args):
    dataset_train, dataset_test = get_data(args.data, args.fail_after)
    if args.input == 'dataflow':
        data = {'dataflow': dataset_train}          # tensorpack's FeedInput/QueueInput over inputpipe's DataFlow
        test_input = dataset_test
    elif args.input == 'feed':
        data = {'data': FeedInput(dataset_train)}
        test_input = FeedInput(dataset_test, infinite=False)
    elif args.input == 'tensorpack-staging':     # mixed up: refused, with the fix
        data = {'data': tensorpack.StagingInput(QueueInput(dataset_train))}
        test_input = dataset_test
    else:
        data = {'data': QueueInput(dataset_train, in_worker=args.input == 'queue-worker')}
        test_input = QueueInput(dataset_test)
    recorder, inference = InputRecorder('image_id'), InferenceRecorder('label')
    config = TrainConfig(
        model=Model(),
        callbacks=[
            ModelSaver(checkpoint_dir=args.logdir,       # the input position is saved with the model
                       var_collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
                                        tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS]),
            InferenceRunner(test_input, [ScalarStats(['cross_entropy_loss', 'accuracy']), inference]),
            recorder,
        ],
        steps_per_epoch=args.steps_per_epoch or len(dataset_train),
        max_epoch=args.epochs,
        **data)
    if args.load:
        config.session_init = ChainInit([SaverRestore(args.load), RestoreInputPosition(args.load)])
    return config, recorder, inference


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', required=True)
    parser.add_argument('--logdir', required=True)
    parser.add_argument('--trainer', choices=['simple', 'queue'], default='simple')
    parser.add_argument('--input', choices=['dataflow', 'queue', 'queue-worker', 'feed', 'tensorpack-staging'],
                        default='queue')
    parser.add_argument('--fail-after', type=int, help='the training DataFlow raises KeyError at this image')
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--steps-per-epoch', type=int, help='default: one pass over the training data')
    parser.add_argument('--load', help='a checkpoint to continue from')
    args = parser.parse_args()

    config, recorder, inference = get_config(args)
    trainer = QueueInputTrainer() if args.trainer == 'queue' else SimpleTrainer()
    launch_train_with_config(config, trainer)
    report(steps=[np.ravel(step).tolist() for step in recorder.steps], inference=inference.passes,
           global_step=trainer.loop.global_step)
