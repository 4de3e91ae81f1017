"""The fix-rate benchmark's input: public models that break under torch.compile.

The model list and the way each model is built restate, in this project's
own words, the build rules of the public graph-break corpus
``penguinwu/oss-model-graph-break-corpus`` (commit 0dbe2f7, 2026-04-02:
468 HuggingFace models, torch 2.10, transformers 5.4.0), whose authors
selected the models, found the configurations and inputs that make each one
run eagerly, and recorded which break under ``torch.compile(fullgraph=True)``.
``MODELS`` holds the 92 models that corpus lists as breaking in static eval
mode (default config, ``model.eval()``, ``torch.no_grad()``, batch 2).

How a model is built (``build``):

- its config is the transformers class's default, with the few fields set
  that the default leaves unusable for that model (``CONFIG_FIXES``), then
  made small: more than four layers become two, a hidden size above 4096
  becomes 1024 (heads and the MLP scaled with it), more than four experts
  become four (top-k no more than the experts), sub-configs the same way, a
  ``layer_types`` list cut to the layers kept with every kind of layer
  still present. Sizes only: the forward runs the same code. The corpus ran
  on a GPU; here, on a CPU, two more cuts keep a model under a few hundred
  MB: a hidden size above 1024 becomes 1024 as above, and a vocabulary
  above 8192 rows becomes 8192 where every special token id the config
  names fits (``WIDTH``, ``ROWS``); the other head counts (a state-space
  mixer's) shrink with the width. A model whose forward fails so (a size
  derived from the width without being named, or one that is not) is built
  with fewer cuts (``CUTS``, in order), and at the corpus's sizes last;
- its inputs follow its kind (``MODELS``): token ids and a mask of 32
  tokens for text, encoder and decoder ids for sequence-to-sequence, a
  second of 16 kHz audio, an image at the config's size, patches already
  flattened for vision towers that take them so, ...; a vocabulary is cut
  to 1000 ids;
- everything is drawn from ``torch.manual_seed(0)``, so two processes build
  the same weights and inputs.

A target factory per model: ``benchmarks.fix_rate_models:BartModel`` (the
doctor's ``--target`` protocol), which returns the model's forward under
``torch.no_grad()`` and its inputs.
"""

from __future__ import annotations

import math
import sys

CORPUS = {
    "repository": "penguinwu/oss-model-graph-break-corpus",
    "commit": "0dbe2f7",
    "torch": "2.10.0",
    "transformers": "5.4.0",
    "selection": "eval status graph_break (static shapes, fullgraph=True, backend=eager)",
}

BATCH = 2
SEQ = 32
VOCAB_CAP = 1000
WIDTH = 1024
ROWS = 8192

# Kind of inputs per model. Kinds are described in ``_inputs``.
MODELS = {
    "AriaModel": "multimodal", "AriaTextModel": "text", "AutoformerModel": "time-series",
    "BambaModel": "text", "BartModel": "seq2seq", "BigBirdPegasusModel": "seq2seq",
    "BlenderbotModel": "seq2seq", "BlenderbotSmallModel": "seq2seq", "DFineModel": "vision",
    "Data2VecAudioModel": "waveform", "DbrxModel": "text", "DeformableDetrModel": "vision",
    "EncodecModel": "codec", "FSMTModel": "seq2seq", "FalconH1Model": "text",
    "FalconMambaModel": "text", "FastSpeech2ConformerModel": "phonemes",
    "Florence2Model": "multimodal", "FunnelModel": "text", "Glm4vMoeVisionModel": "glm-patches",
    "Glm4vVisionModel": "glm-patches", "GlmImageVisionModel": "image-patches",
    "GlmOcrVisionModel": "glm-patches", "GotOcr2Model": "multimodal",
    "GraniteMoeHybridModel": "text", "GroundingDinoModel": "grounding", "HubertModel": "waveform",
    "InformerModel": "time-series", "InternVLModel": "multimodal", "JambaModel": "text",
    "LEDModel": "seq2seq", "LongT5Model": "seq2seq", "LongcatFlashModel": "text",
    "LongformerModel": "text", "LwDetrModel": "vision", "M2M100Model": "seq2seq",
    "MBartModel": "seq2seq", "MMGroundingDinoModel": "grounding", "MT5Model": "seq2seq",
    "MambaModel": "text", "MarianModel": "seq2seq", "MimiModel": "codec",
    "MoonshineModel": "speech-seq2seq", "MoonshineStreamingModel": "speech-seq2seq",
    "MraModel": "text", "MvpModel": "seq2seq", "NemotronHModel": "text",
    "NllbMoeModel": "seq2seq", "OlmoHybridModel": "text", "PLBartModel": "seq2seq",
    "PPDocLayoutV2Model": "vision", "PPDocLayoutV3Model": "vision",
    "PaddleOCRVisionModel": "paddle-patches", "PaliGemmaModel": "multimodal",
    "PeAudioModel": "text-audio", "PegasusModel": "seq2seq", "PegasusXModel": "seq2seq",
    "ProphetNetModel": "seq2seq", "Qwen3NextModel": "text", "Qwen3_5Model": "text",
    "Qwen3_5MoeModel": "text", "Qwen3_5MoeTextModel": "text", "Qwen3_5TextModel": "text",
    "RTDetrModel": "vision", "RTDetrV2Model": "vision", "RecurrentGemmaModel": "text",
    "ReformerModel": "text-axial", "RwkvModel": "text", "SEWModel": "waveform",
    "SeamlessM4TModel": "seq2seq", "SeamlessM4Tv2Model": "seq2seq", "Siglip2Model": "siglip2",
    "Siglip2VisionModel": "siglip2", "Speech2TextModel": "speech2text",
    "SpeechEncoderDecoderModel": "speech-seq2seq", "SpeechT5Model": "speecht5",
    "SwitchTransformersModel": "seq2seq", "T5Model": "seq2seq",
    "TimeSeriesTransformerModel": "time-series", "UMT5Model": "seq2seq", "UdopModel": "udop",
    "UniSpeechModel": "waveform", "UniSpeechSatModel": "waveform",
    "VideoLlama3VisionModel": "videollama-patches", "ViltModel": "vilt", "VitsModel": "text",
    "Wav2Vec2BertModel": "features", "Wav2Vec2ConformerModel": "waveform",
    "Wav2Vec2Model": "waveform", "WavLMModel": "waveform", "WhisperModel": "whisper",
    "XcodecModel": "codec",
}

# Image tokens a multimodal model's prompt must hold for its image features
# (the corpus found these counts per model; InternVL's is ours: its forward
# checks the count eagerly in this transformers); the prompt is that many
# image tokens, then 8 text tokens.
IMAGE_TOKENS = {"AriaModel": 128, "Florence2Model": 50, "GotOcr2Model": 256, "InternVLModel": 256,
                "PaliGemmaModel": 256}


def _config(name, cuts):
    import transformers

    if name == "SpeechEncoderDecoderModel":
        return transformers.SpeechEncoderDecoderConfig.from_encoder_decoder_configs(
            transformers.Wav2Vec2Config(num_hidden_layers=2),
            transformers.BertConfig(num_hidden_layers=2, is_decoder=True, add_cross_attention=True))
    config = getattr(transformers, name.replace("Model", "Config"))()
    fix = CONFIG_FIXES.get(name)
    if fix is not None:
        fix(config)
    shrink(config, cuts)
    for obj in (config, getattr(config, "text_config", None)):
        if obj is not None:
            _cut_layer_types(obj)
    return config


def _time_series(config):
    config.prediction_length = config.prediction_length or 24
    config.context_length = config.context_length or 96


def _dbrx(config):
    config.hidden_size = config.d_model
    config.attn_config.rope_theta = getattr(config.attn_config, "rope_theta", 500000.0)
    if config.attn_config.clip_qkv is None:
        config.attn_config.clip_qkv = 8.0


def _dbrx_after(config):
    config.d_model = config.hidden_size
    config.ffn_config.ffn_hidden_size = config.hidden_size


def _mrope(config):
    for obj in (config, getattr(config, "text_config", None)):
        rope = getattr(obj, "rope_parameters", None) if obj is not None else None
        if isinstance(rope, dict) and "mrope_section" not in rope:
            rope["mrope_section"] = [16, 24, 24]


def _olmo_hybrid(config):
    config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 1024, 2048
    config.num_attention_heads, config.num_key_value_heads = 8, 4


def _aria(config):
    # The projector maps a patch count to a query count; the default image
    # gives a count its table lacks: the smallest query count serves it.
    vision = config.vision_config
    size = vision.image_size[0] if isinstance(vision.image_size, (list, tuple)) else vision.image_size
    patch = vision.patch_size[0] if isinstance(vision.patch_size, (list, tuple)) else vision.patch_size
    table = config.projector_patch_to_query_dict
    table.setdefault((size // patch) ** 2, min(table.values()))


def _lw_detr(config):
    if not config.projector_scale_factors:
        config.projector_scale_factors = [1.0]
        config.num_feature_levels = 1
        config.projector_in_channels = [config.d_model]
    backbone = config.backbone_config
    if backbone.num_hidden_layers > 4:
        backbone.num_hidden_layers = 2
        backbone.out_indices = [1, 2]
        backbone.out_features = ["stage1", "stage2"]
    backbone.image_size = 256
    config.num_queries = 10
    config.group_detr = 1


def _jamba_after(config):
    if config.attn_layer_period > config.num_hidden_layers:
        config.attn_layer_period, config.attn_layer_offset = 1, 0


def _moonshine_streaming(config):
    if getattr(config, "num_key_value_heads", None) is None:
        config.num_key_value_heads = config.num_attention_heads


CONFIG_FIXES = {
    "AutoformerModel": _time_series, "InformerModel": _time_series,
    "TimeSeriesTransformerModel": _time_series, "DbrxModel": _dbrx, "AriaModel": _aria,
    "Qwen3_5Model": _mrope, "Qwen3_5MoeModel": _mrope, "Qwen3_5TextModel": _mrope,
    "Qwen3_5MoeTextModel": _mrope, "OlmoHybridModel": _olmo_hybrid, "LwDetrModel": _lw_detr,
    "MoonshineStreamingModel": _moonshine_streaming,
}
def _recurrent_gemma_after(config):
    # Its blocks cycle recurrent, recurrent, attention: three layers keep one
    # of each kind (ours: with two, this transformers finds no attention block).
    config.num_hidden_layers = 3


AFTER_SHRINK = {"DbrxModel": _dbrx_after, "JambaModel": _jamba_after, "RecurrentGemmaModel": _recurrent_gemma_after}

_LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers",
           "decoder_layers", "num_encoder_layers", "num_decoder_layers")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K = ("num_experts_per_tok", "num_selected_experts", "top_k")


def _set(config, attr, value):
    try:
        setattr(config, attr, value)
    except NotImplementedError:
        pass  # a size derived from others (Funnel's layers from its blocks): kept


CUTS = (("width", "heads", "rows"), ("width", "rows"), ("rows",), ())


def shrink(config, cuts=CUTS[0]):
    """Make ``config`` small without changing which code its model runs;
    ``cuts`` names the CPU cuts to make too (``WIDTH``, ``ROWS``)."""
    for attr in _LAYERS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 4:
            _set(config, attr, 2)
    hidden = getattr(config, "hidden_size", None) or 0
    width = WIDTH if "width" in cuts else 4096
    if isinstance(hidden, int) and hidden > width:
        factor = int(hidden / 1024)
        config.hidden_size = 1024
        if getattr(config, "intermediate_size", None):
            config.intermediate_size = max(config.intermediate_size // factor, 2048)
        if getattr(config, "num_attention_heads", None):
            config.num_attention_heads = max(config.num_attention_heads // factor, 4)
        if getattr(config, "num_key_value_heads", None):
            config.num_key_value_heads = min(config.num_key_value_heads, config.num_attention_heads)
        # Other head counts of a fixed head size (a state-space mixer's, a
        # linear attention's) shrink with the width they split.
        for key, value in config.to_dict().items() if "heads" in cuts else ():
            if ("heads" in key and isinstance(value, int) and value >= factor and not value % factor
                    and key not in ("num_attention_heads", "num_key_value_heads")):
                _set(config, key, value // factor)
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden % heads:
        heads = next((h for h in (16, 8, 4) if hidden % h == 0), heads)
        config.num_attention_heads = heads
        if (getattr(config, "num_key_value_heads", None) or 0) > heads:
            config.num_key_value_heads = heads
    heads, kv = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    if isinstance(heads, int) and isinstance(kv, int) and kv > 0 and heads % kv:
        config.num_key_value_heads = next(k for k in range(kv, 0, -1) if heads % k == 0)
    for attr in _EXPERTS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 4:
            setattr(config, attr, 4)
        experts = getattr(config, attr, None)
        if isinstance(experts, int):
            for k in _TOP_K:
                top = getattr(config, k, None)
                if isinstance(top, int) and top > experts:
                    setattr(config, k, experts)
    rows = getattr(config, "vocab_size", None)
    if "rows" in cuts and isinstance(rows, int) and rows > ROWS:
        named = [v for k, v in config.to_dict().items()
                 if isinstance(v, int) and (k.endswith("_token_id") or k.endswith("_token_index"))]
        if all(v < ROWS for v in named):
            config.vocab_size = ROWS
    for sub in ("text_config", "decoder", "encoder", "audio_config", "speech_config"):
        obj = getattr(config, sub, None)
        if obj is not None and hasattr(obj, "num_hidden_layers"):
            shrink(obj, cuts)
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        # A vision tower keeps its width: its pooling follows its image grid.
        for attr in ("num_hidden_layers", "num_layers"):
            value = getattr(vision, attr, None)
            if isinstance(value, int) and value > 4:
                setattr(vision, attr, 2)


def _cut_layer_types(config):
    layers, kinds = getattr(config, "num_hidden_layers", None), getattr(config, "layer_types", None)
    if not isinstance(layers, int) or not isinstance(kinds, list) or len(kinds) <= layers:
        return
    distinct = list(dict.fromkeys(kinds))
    if layers >= len(distinct):
        kept = distinct + [distinct[-1]] * (layers - len(distinct))
    else:
        kept = kinds[:layers]
    config.layer_types = kept


def _vocab(config):
    text = getattr(config, "text_config", None)
    size = getattr(config, "vocab_size", None) or getattr(text, "vocab_size", None) or VOCAB_CAP
    return min(size, VOCAB_CAP)


def _size(value, default):
    value = value if value is not None else default
    return value[0] if isinstance(value, (list, tuple)) else value


def _inputs(name, kind, config, model):
    """The keyword inputs of ``name``'s forward, by its kind."""
    import torch

    b, s = BATCH, SEQ
    vocab = _vocab(config)

    def ids(length=s, high=vocab):
        return torch.randint(0, high, (b, length))

    def mask(length=s):
        return torch.ones(b, length, dtype=torch.long)

    if kind == "text":
        return {"input_ids": ids(), "attention_mask": mask()}
    if kind == "text-axial":
        length = math.prod(config.axial_pos_shape)
        return {"input_ids": ids(length), "attention_mask": mask(length)}
    if kind == "phonemes":
        return {"input_ids": ids(high=min(config.vocab_size, VOCAB_CAP))}
    if kind == "seq2seq":
        return {"input_ids": ids(), "decoder_input_ids": ids()}
    if kind == "udop":
        return {"input_ids": ids(), "decoder_input_ids": ids(), "bbox": torch.rand(b, s, 4) * 1000}
    if kind == "waveform":
        return {"input_values": torch.randn(b, 16000)}
    if kind == "codec":
        return {"input_values": torch.randn(b, 1, 16000)}
    if kind == "features":
        return {"input_features": torch.randn(b, 100, 160)}
    if kind == "text-audio":
        return {"input_ids": ids(), "attention_mask": mask(), "input_values": torch.randn(b, 1, 16000)}
    if kind == "speech-seq2seq":
        return {"input_values": torch.randn(b, 16000), "decoder_input_ids": ids()}
    if kind == "whisper":
        start = config.decoder_start_token_id or 1
        return {"input_features": torch.randn(b, 80, 3000),
                "decoder_input_ids": torch.full((b, 1), start, dtype=torch.long)}
    if kind == "speech2text":
        bins = getattr(config, "num_mel_bins", None) or getattr(config, "input_feat_per_channel", 80)
        return {"input_features": torch.randn(b, 100, bins), "decoder_input_ids": ids()}
    if kind == "speecht5":
        return {"input_values": torch.randn(b, 100, config.hidden_size),
                "decoder_input_values": torch.randn(b, 50, config.hidden_size)}
    if kind == "time-series":
        lag = max(config.lags_sequence or [0])
        past = config.context_length + lag
        feats = config.num_time_features or 0
        return {"past_values": torch.randn(b, past), "past_observed_mask": torch.ones(b, past),
                "past_time_features": torch.randn(b, past, feats),
                "future_time_features": torch.randn(b, config.prediction_length, feats)}
    if kind == "vision":
        if name == "LwDetrModel":
            backbone = config.backbone_config
            h = w = _size(backbone.image_size, 256)
            channels = getattr(backbone, "num_channels", 3)
        else:
            vision = getattr(config, "vision_config", None)
            size = getattr(config, "image_size", None) or getattr(vision, "image_size", None)
            if isinstance(size, (list, tuple)):
                h, w = size[0], size[-1]
            else:
                h = w = size or 224
            channels = getattr(config, "num_channels", 3)
        return {"pixel_values": torch.randn(b, channels, h, w)}
    if kind in ("multimodal", "grounding"):
        vision = getattr(config, "vision_config", None) or getattr(config, "image_config", None)
        size = _size(getattr(vision, "image_size", None), 224) if kind == "multimodal" else 224
        channels = getattr(vision, "num_channels", 3) if vision is not None else 3
        frames = getattr(vision, "num_frames", None)
        shape = (b, frames, channels, size, size) if frames else (b, channels, size, size)
        inputs = {"input_ids": ids(), "attention_mask": mask(), "pixel_values": torch.randn(*shape)}
        count = IMAGE_TOKENS.get(name)
        token = getattr(config, "image_token_id", None)
        token = getattr(config, "image_token_index", None) if token is None else token
        if count and token is not None:
            if token >= vocab:
                model.resize_token_embeddings(token + 1, mean_resizing=False)
            prompt = ids(count + 8)
            prompt[:, :count] = token
            inputs["input_ids"], inputs["attention_mask"] = prompt, mask(count + 8)
        if name == "PaliGemmaModel":
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        return inputs
    if kind == "vilt":
        size = _size(config.image_size, 384)
        return {"input_ids": ids(), "attention_mask": mask(), "pixel_values": torch.randn(b, 3, size, size)}
    if kind in ("glm-patches", "image-patches", "videollama-patches"):
        grid = torch.tensor([[1, 4, 8]] * b, dtype=torch.long)
        patches = int(grid.prod(dim=1).sum())
        channels = getattr(config, "in_channels", None) or getattr(config, "num_channels", 3)
        patch = config.patch_size
        if kind == "glm-patches":
            width = channels * config.temporal_patch_size * patch * patch
            return {"hidden_states": torch.randn(patches, width), "grid_thw": grid}
        inputs = {"pixel_values": torch.randn(patches, channels * patch * patch), "grid_thw": grid}
        if kind == "videollama-patches":
            inputs["merge_sizes"] = torch.ones(b, dtype=torch.long)
        return inputs
    if kind == "paddle-patches":
        grid = [(1, 4, 8)] * b
        patches = sum(t * h * w for t, h, w in grid)
        per_frame = torch.tensor([h * w for t, h, w in grid for _ in range(t)])
        bounds = torch.nn.functional.pad(per_frame.cumsum(0, dtype=torch.int32), (1, 0))
        return {"pixel_values": torch.randn(1, patches, config.num_channels, config.patch_size, config.patch_size),
                "cu_seqlens": bounds, "image_grid_thw": grid}
    if kind == "siglip2":
        vision = getattr(config, "vision_config", config)
        side = int(vision.num_patches ** 0.5)
        width = vision.num_channels * vision.patch_size ** 2
        inputs = {"pixel_values": torch.randn(b, vision.num_patches, width),
                  "pixel_attention_mask": torch.ones(b, vision.num_patches, dtype=torch.long),
                  "spatial_shapes": torch.tensor([[side, side]] * b, dtype=torch.long)}
        if name == "Siglip2Model":
            inputs.update(input_ids=ids(), attention_mask=mask())
        return inputs
    raise ValueError(f"{name}: no inputs for kind {kind!r}")


def build(name, cuts=CUTS[0]):
    """(model in eval mode, its keyword inputs), drawn from seed 0."""
    import torch
    import transformers

    if name not in MODELS:
        raise KeyError(f"{name} is not one of the benchmark's models")
    torch.manual_seed(0)
    config = _config(name, cuts)
    after = AFTER_SHRINK.get(name)
    if after is not None:
        after(config)
    model = getattr(transformers, name)(config).eval()
    return model, _inputs(name, MODELS[name], config, model)


def target(name):
    """The doctor's ``(fn, args, kwargs)`` for ``name``: its forward under no_grad."""
    import torch

    for cuts in CUTS[:-1]:
        try:
            model, inputs = build(name, cuts)
            with torch.no_grad():
                model(**inputs)
            break
        except Exception as exc:  # a cut broke it: fewer cuts
            print(f"{name}: cutting {', '.join(cuts)} fails ({type(exc).__name__}: {exc}"[:240] + "): fewer cuts",
                  file=sys.stderr)
    else:
        model, inputs = build(name, CUTS[-1])

    def forward(**kwargs):
        with torch.no_grad():
            return model(**kwargs)

    return forward, (), inputs


def __getattr__(name):
    if name in MODELS:
        return lambda: target(name)
    raise AttributeError(name)
