"""The target model: layers, cache, stack, backends, the model itself, loading, and the choice of
engine configuration. ``from specharness.model import TargetModel`` is what most code needs."""

from .accel.row_topk import topk_indices
from .backends import COMPILE_MODES, WIDTH_BUCKETS, ForwardRequest, GraphKey, bucket
from .cache import KVCache
from .layers import (Attention, AttentionWeights, HeadShape, LayerWeights, argmax, attention_bias, attention_mask,
                     decoder_layer, mlp, read_bytes, rms_norm, rotary, self_attention)
from .loading import DEFAULT_MODEL, DEFAULT_MODEL_NAME, DTYPES, SUPPORTED_FAMILIES
from .stack import DecoderStack, Skip, stack_name
from .target import Forward, TargetModel

__all__ = ["COMPILE_MODES", "WIDTH_BUCKETS", "ForwardRequest", "GraphKey", "bucket", "KVCache", "Attention",
           "AttentionWeights", "HeadShape", "LayerWeights", "argmax", "attention_bias", "attention_mask", "decoder_layer", "mlp",
           "read_bytes", "rms_norm", "rotary", "self_attention", "DEFAULT_MODEL", "DEFAULT_MODEL_NAME", "DTYPES",
           "SUPPORTED_FAMILIES", "DecoderStack", "Skip", "stack_name", "Forward", "TargetModel", "topk_indices"]
