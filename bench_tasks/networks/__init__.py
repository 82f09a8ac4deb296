"""The classic MXNet image-classification networks, built as MXNet symbols.

These are this project's own definitions of the networks of MXNet's
``example/image-classification/symbols`` (not the Gluon model-zoo variants, which are
different networks), so throughputs are comparable with figures published with MXNet's
harness. Parameter counts equal those definitions' exactly (see the tests).

Interface (used by bench_tasks.measure): ``get_symbol(name, num_classes=1000,
dtype="float32")`` returns the symbol ending in ``SoftmaxOutput`` named ``softmax`` with
inputs ``data`` and ``softmax_label``; ``image_shape(name)`` returns (C, H, W).
"""
