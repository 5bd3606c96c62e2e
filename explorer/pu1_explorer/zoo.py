"""The demand zoo: real architectures users bring, built small with random weights, and how each one runs.

Hugging Face `transformers` models come from small configs (nothing downloads); PyTorch's own `torch.nn`
layers stand beside them. Each model runs as a training step (forward, loss, backward, an AdamW step with
PyTorch's default implementation), as inference, and some under autocast too: `demand.py` counts the operators
each run reaches.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from pu1_explorer.workloads import SmallTransformer, small_cnn, small_mlp

TRAIN, INFERENCE, AUTOCAST_TRAIN = "train", "inference", "autocast train"
VOCABULARY = 128


@dataclass(frozen=True)
class ZooModel:
    """One architecture of the zoo: how to build it and a batch for it, and what to say about where it comes from."""

    name: str
    family: str
    source: str  # the class it is built from
    config: dict  # the small configuration's values
    inputs: str  # the batch, in words
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], dict]  # keyword arguments of forward, on the CPU
    modes: tuple[str, ...] = (TRAIN, INFERENCE)
    loss: Callable[[object], torch.Tensor] = field(default=lambda output: output.loss)


def _transformers_model(class_name: str, config_name: str, config: dict) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        try:
            import transformers
        except ImportError as error:
            raise ImportError("the zoo's Hugging Face models need transformers: pip install transformers") from error
        return getattr(transformers, class_name)(getattr(transformers, config_name)(**config))
    return build


def _tokens(shape: tuple[int, int], with_labels: str | None = "labels") -> Callable[[torch.Generator], dict]:
    def batch(generator: torch.Generator) -> dict:
        ids = torch.randint(0, VOCABULARY, shape, generator=generator)
        result = {"input_ids": ids}
        if with_labels == "labels":
            result["labels"] = ids.clone()
        elif with_labels == "classes":
            result["labels"] = torch.randint(0, 2, (shape[0],), generator=generator)
        return result
    return batch


def _sequence_to_sequence(source: tuple[int, int], target: tuple[int, int]) -> Callable[[torch.Generator], dict]:
    def batch(generator: torch.Generator) -> dict:
        return {"input_ids": torch.randint(3, VOCABULARY, source, generator=generator),
                "labels": torch.randint(3, VOCABULARY, target, generator=generator)}
    return batch


def _images(size: int, classes: int = 10) -> Callable[[torch.Generator], dict]:
    def batch(generator: torch.Generator) -> dict:
        return {"pixel_values": torch.randn(2, 3, size, size, generator=generator),
                "labels": torch.randint(0, classes, (2,), generator=generator)}
    return batch


def _audio_features(bins: int, frames: int, target: int) -> Callable[[torch.Generator], dict]:
    def batch(generator: torch.Generator) -> dict:
        return {"input_features": torch.randn(2, bins, frames, generator=generator),
                "labels": torch.randint(3, VOCABULARY, (2, target), generator=generator)}
    return batch


def _waveform(samples: int) -> Callable[[torch.Generator], dict]:
    def batch(generator: torch.Generator) -> dict:
        return {"input_values": torch.randn(2, samples, generator=generator),
                "labels": torch.randint(0, 2, (2,), generator=generator)}
    return batch


def _classified(make_inputs: Callable[[torch.Generator], torch.Tensor], classes: int = 10):
    def batch(generator: torch.Generator) -> dict:
        inputs = make_inputs(generator)
        return {"inputs": inputs, "labels": torch.randint(0, classes, (inputs.shape[0],), generator=generator)}
    return batch


class Classifier(nn.Module):
    """A torch.nn body and a cross-entropy loss, so that every zoo model returns an output with `.loss`."""

    def __init__(self, body: nn.Module, head: nn.Module | None = None) -> None:
        super().__init__()
        self.body, self.head = body, head or nn.Identity()

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> SimpleOutput:
        logits = self.head(self.body(inputs))
        return SimpleOutput(nn.functional.cross_entropy(logits, labels))


@dataclass
class SimpleOutput:
    loss: torch.Tensor


class LastStep(nn.Module):
    """A recurrent layer's output at the last time step, through a linear head."""

    def __init__(self, recurrent: nn.Module, width: int) -> None:
        super().__init__()
        self.recurrent, self.head = recurrent, nn.Linear(width, 10)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        output, _ = self.recurrent(inputs)
        return self.head(output[:, -1])


class EncoderDecoder(nn.Module):
    """nn.Transformer over embedded tokens, with a causal target mask."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCABULARY, width)
        self.transformer = nn.Transformer(width, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(width, VOCABULARY)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> SimpleOutput:
        mask = nn.Transformer.generate_square_subsequent_mask(labels.shape[1])
        hidden = self.transformer(self.embedding(input_ids), self.embedding(labels), tgt_mask=mask.to(labels.device))
        return SimpleOutput(nn.functional.cross_entropy(self.head(hidden).flatten(0, 1), labels.flatten()))


def _hugging_face(name: str, family: str, class_name: str, config_name: str, config: dict, inputs: str,
                  batch: Callable[[torch.Generator], dict], modes: tuple[str, ...] = (TRAIN, INFERENCE)) -> ZooModel:
    return ZooModel(name, family, f"transformers.{class_name}", config, inputs,
                    _transformers_model(class_name, config_name, config), batch, modes)


_SMALL_DECODER = {"vocab_size": VOCABULARY, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
_SMALL_ENCODER = {"vocab_size": VOCABULARY, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "max_position_embeddings": 64}
_SMALL_SEQ2SEQ = {"vocab_size": VOCABULARY, "d_model": 32, "encoder_layers": 1, "decoder_layers": 1,
                  "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
                  "decoder_ffn_dim": 64, "max_position_embeddings": 64, "pad_token_id": 1, "bos_token_id": 0,
                  "eos_token_id": 2, "decoder_start_token_id": 2}

ZOO: tuple[ZooModel, ...] = (
    _hugging_face("gpt2", "GPT-2", "GPT2LMHeadModel", "GPT2Config",
                  {"vocab_size": VOCABULARY, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},
                  "token ids 2×16, labels the same ids", _tokens((2, 16)), (TRAIN, INFERENCE, AUTOCAST_TRAIN)),
    _hugging_face("bert", "BERT", "BertForSequenceClassification", "BertConfig", _SMALL_ENCODER,
                  "token ids 2×16, 2 class labels", _tokens((2, 16), "classes")),
    _hugging_face("t5", "T5", "T5ForConditionalGeneration", "T5Config",
                  {"vocab_size": VOCABULARY, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
                   "num_decoder_layers": 2, "num_heads": 4, "decoder_start_token_id": 0},
                  "token ids 2×16, target ids 2×8", _sequence_to_sequence((2, 16), (2, 8))),
    _hugging_face("bart", "BART", "BartForConditionalGeneration", "BartConfig", _SMALL_SEQ2SEQ,
                  "token ids 2×16, target ids 2×8", _sequence_to_sequence((2, 16), (2, 8))),
    _hugging_face("llama", "Llama", "LlamaForCausalLM", "LlamaConfig", _SMALL_DECODER,
                  "token ids 2×16, labels the same ids", _tokens((2, 16)), (TRAIN, INFERENCE, AUTOCAST_TRAIN)),
    _hugging_face("vit", "ViT", "ViTForImageClassification", "ViTConfig",
                  {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "intermediate_size": 64, "num_labels": 10},
                  "images 2×3×32×32, 10 class labels", _images(32)),
    _hugging_face("resnet", "ResNet", "ResNetForImageClassification", "ResNetConfig",
                  {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1], "num_labels": 10},
                  "images 2×3×32×32, 10 class labels", _images(32)),
    _hugging_face("whisper", "Whisper", "WhisperForConditionalGeneration", "WhisperConfig",
                  {"vocab_size": VOCABULARY, "num_mel_bins": 16, "d_model": 32, "encoder_layers": 1,
                   "decoder_layers": 1, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                   "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_source_positions": 16,
                   "max_target_positions": 32, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                   "decoder_start_token_id": 2, "suppress_tokens": [], "begin_suppress_tokens": []},
                  "log-mel features 2×16×32, target ids 2×8", _audio_features(16, 32, 8)),
    _hugging_face("wav2vec2", "Wav2Vec2", "Wav2Vec2ForSequenceClassification", "Wav2Vec2Config",
                  {"vocab_size": VOCABULARY, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                   "intermediate_size": 64, "conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3],
                   "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4, "num_labels": 2,
                   "mask_time_prob": 0.0},
                  "waveforms 2×800, 2 class labels", _waveform(800)),
    ZooModel("mlp", "MLP", "torch.nn: Linear, ReLU, GELU", {}, "vectors 32×64, 10 class labels",
             lambda: Classifier(small_mlp()), _classified(lambda g: torch.randn(32, 64, generator=g))),
    ZooModel("cnn", "CNN", "torch.nn: Conv2d, BatchNorm2d, MaxPool2d", {}, "images 8×3×16×16, 10 class labels",
             lambda: Classifier(small_cnn()), _classified(lambda g: torch.randn(8, 3, 16, 16, generator=g)),
             (TRAIN, INFERENCE, AUTOCAST_TRAIN)),
    ZooModel("transformer-encoder", "Transformer", "torch.nn.TransformerEncoderLayer", {},
             "token ids 8×12, 10 class labels", lambda: Classifier(SmallTransformer()),
             _classified(lambda g: torch.randint(0, 100, (8, 12), generator=g))),
    ZooModel("transformer", "Transformer", "torch.nn.Transformer", {"d_model": 32, "nhead": 4, "layers": "1+1"},
             "token ids 2×16, target ids 2×8", EncoderDecoder, _sequence_to_sequence((2, 16), (2, 8))),
    ZooModel("lstm", "LSTM", "torch.nn.LSTM", {"hidden_size": 32, "num_layers": 2}, "sequences 4×10×16",
             lambda: Classifier(LastStep(nn.LSTM(16, 32, num_layers=2, batch_first=True), 32)),
             _classified(lambda g: torch.randn(4, 10, 16, generator=g)), (TRAIN, INFERENCE, AUTOCAST_TRAIN)),
    ZooModel("gru", "GRU", "torch.nn.GRU", {"hidden_size": 32, "num_layers": 2}, "sequences 4×10×16",
             lambda: Classifier(LastStep(nn.GRU(16, 32, num_layers=2, batch_first=True), 32)),
             _classified(lambda g: torch.randn(4, 10, 16, generator=g))),
)


def zoo_model(name: str) -> ZooModel:
    """The zoo model called `name`; a ValueError naming the zoo's models otherwise."""
    for model in ZOO:
        if model.name == name:
            return model
    raise ValueError(f"{name!r} is not a model of the zoo: {', '.join(model.name for model in ZOO)}")


def run(model: ZooModel, mode: str, device: torch.device, seed: int = 0) -> None:
    """One run of `model` on `device`: a training step (forward, loss, backward, AdamW step) or inference."""
    torch.manual_seed(seed)
    module = model.build().to(device)
    batch = {name: value.to(device) for name, value in model.batch(torch.Generator().manual_seed(seed)).items()}
    if mode == INFERENCE:
        module.eval()
        with torch.no_grad():
            module(**batch)
        return
    module.train()
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    with torch.autocast(device.type, enabled=mode == AUTOCAST_TRAIN):
        loss = model.loss(module(**batch))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
