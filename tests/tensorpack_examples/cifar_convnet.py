#!/usr/bin/env python
"""tensorpack's examples/basics/cifar-convnet.py on several towers, with only its data side
imported from inputpipe.

The model (tensorpack's layers with ``BNReLU``), the multi-GPU trainers, ``TrainConfig``,
``ModelSaver`` and ``InferenceRunner`` are tensorpack's; the CIFAR reader, the augmentors,
``BatchData``, ``MultiProcessRunnerZMQ`` and the InputSources come from inputpipe. The towers are
tensorpack's ``/gpu:N`` devices, placed on the CPU by the session's soft placement where there is
no GPU. Smaller than the example (8 filters, batches of 8, CIFAR files that the test writes).
Prints one ``RESULT {json}`` line: the labels each tower trained on at each step, the labels of
each inference pass, the global step.

Usage::

    python cifar_convnet.py --data DIR --logdir DIR [--trainer replicated|parameter] [--towers 2] \\
        [--input queue|staging|dataflow] [--workers 2] [--epochs 2]
"""
import argparse

import tensorflow as tf
from tensorpack import *  # noqa: F401,F403  (as the example: everything of tensorpack's ...)
from tensorpack import (BNReLU, BatchNorm, Conv2D, InferenceRunner, LinearWrap, MaxPooling, ModelDesc,
                        ModelSaver, ScalarStats, SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated,
                        TrainConfig, argscope, launch_train_with_config)
from tensorpack.tfutils.summary import add_moving_summary

# ... and the data side from inputpipe: the only lines that differ from a tensorpack script
from inputpipe.dataflow import AugmentImageComponent, BatchData, MultiProcessRunnerZMQ, dataset, imgaug
from inputpipe.input_source import QueueInput, StagingInput

from recorders import InferenceRecorder, InputRecorder, report

BATCH = 8


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 30, 30, 3), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        tf.identity(label, name='label_seen')       # for the test: what each tower trained on
        image = image / 4.0
        with argscope(Conv2D, activation=BNReLU, use_bias=False, kernel_size=3), \
                argscope([Conv2D, MaxPooling, BatchNorm], data_format='channels_last'):
            logits = LinearWrap(image) \
                .Conv2D('conv1.1', filters=8) \
                .MaxPooling('pool1', 3, stride=2, padding='SAME') \
                .Conv2D('conv2.1', filters=8) \
                .MaxPooling('pool2', 3, stride=2, padding='SAME') \
                .FullyConnected('fc0', 32, activation=tf.nn.relu) \
                .FullyConnected('linear', 10)()
        cost = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label)
        cost = tf.reduce_mean(cost, name='cross_entropy_loss')
        correct = tf.cast(tf.nn.in_top_k(predictions=logits, targets=label, k=1), tf.float32, name='correct')
        add_moving_summary(tf.reduce_mean(correct, name='accuracy'), cost)
        return cost

    def optimizer(self):
        return tf.compat.v1.train.AdamOptimizer(1e-2, epsilon=1e-3)


def get_data(train_or_test, directory, workers):
    is_train = train_or_test == 'train'
    ds = dataset.Cifar10(train_or_test, shuffle=False, dir=directory)
    if is_train:
        augmentors = [
            imgaug.RandomCrop((30, 30)),
            imgaug.Flip(horiz=True),
            imgaug.Brightness(63),
            imgaug.Contrast((0.2, 1.8)),
            imgaug.MeanVarianceNormalize(all_channel=True)
        ]
    else:
        augmentors = [
            imgaug.CenterCrop((30, 30)),
            imgaug.MeanVarianceNormalize(all_channel=True)
        ]
    ds = AugmentImageComponent(ds, augmentors)
    ds = BatchData(ds, BATCH, remainder=not is_train)
    if is_train and workers:
        ds = MultiProcessRunnerZMQ(ds, workers)
    return ds


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', required=True)
    parser.add_argument('--logdir', required=True)
    parser.add_argument('--trainer', choices=['replicated', 'parameter'], default='replicated')
    parser.add_argument('--towers', type=int, default=2)
    parser.add_argument('--input', choices=['queue', 'staging', 'dataflow'], default='queue')
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=2)
    args = parser.parse_args()

    dataset_train = get_data('train', args.data, args.workers)
    dataset_test = get_data('test', args.data, 0)
    if args.input == 'dataflow':
        data = {'dataflow': dataset_train}       # tensorpack's QueueInput + StagingInput over inputpipe's DataFlow
    elif args.input == 'staging':
        data = {'data': StagingInput(QueueInput(dataset_train))}
    else:
        data = {'data': QueueInput(dataset_train)}      # staged by launch_train_with_config, as in tensorpack
    recorder, inference = InputRecorder('label_seen'), InferenceRecorder('label')
    config = TrainConfig(
        model=Model(),
        callbacks=[
            ModelSaver(checkpoint_dir=args.logdir),
            InferenceRunner(dataset_test, [ScalarStats(['accuracy', 'cross_entropy_loss']), inference]),
            recorder,
        ],
        steps_per_epoch=len(dataset_train) // args.towers,
        max_epoch=args.epochs,
        **data)
    if args.trainer == 'replicated':
        trainer = SyncMultiGPUTrainerReplicated(args.towers, mode='cpu')
    else:
        trainer = SyncMultiGPUTrainerParameterServer(args.towers, ps_device='cpu')
    launch_train_with_config(config, trainer)
    report(steps=recorder.steps, inference=inference.passes, global_step=trainer.loop.global_step)
