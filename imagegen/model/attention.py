"""Attention slicing that keeps memory bounded at plain diffusers' speed.

The contract asks for slicing, to fit memory. diffusers' sliced processor builds each slice's
full score matrix, and on a CPU an SD 1.5 step is then about 1.4x slower. torch's fused
attention kernel on a CPU never builds the score matrix: it works through blocks of queries and
keys, so one call over every row already stays within a few MiB (a call whose scores would be
1 GiB grows the peak by about 13 MiB). So without a mask all rows go in one fused call, as plain
diffusers makes it. Slicing by rows at two threads cost 1.07x to 1.10x the UNet call at SD 1.5's
small sizes: each slice is too little work to share among torch's threads.

With a mask (no UNet this service runs passes one) the rows go in slices of the size diffusers
chose once their scores pass ONE_CALL_BYTES, the mask sliced with them."""

import torch
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention, SlicedAttnProcessor

# With a mask, the score matrix (rows x query tokens x key tokens) one call may cover: SD 1.5's
# self-attention at 256x256, guided (16 x 1024 x 1024 fp32).
ONE_CALL_BYTES = 64 * 2**20


class SlicedSdpaProcessor:
    """Attention in one fused call, or with a mask over `slice_size` (batch x head) rows at a
    time."""

    def __init__(self, slice_size: int, one_call_bytes: int = ONE_CALL_BYTES) -> None:
        self.slice_size = slice_size
        self.one_call_bytes = one_call_bytes

    def rows_per_call(self, rows: int, queries: int, keys: int, item_size: int) -> int:
        """All rows when their scores fit in one_call_bytes, else slice_size."""
        whole = rows * queries * keys * item_size <= self.one_call_bytes
        return rows if whole else self.slice_size

    def __call__(
        self,
        attn: Attention,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        temb: torch.Tensor | None = None,
    ) -> torch.Tensor:
        residual = hidden_states
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        input_ndim = hidden_states.ndim
        if input_ndim == 4:
            batch, channel, height, width = hidden_states.shape
            hidden_states = hidden_states.view(batch, channel, height * width).transpose(1, 2)
        batch = hidden_states.shape[0]
        if attention_mask is not None:
            # (batch x heads, 1 or query tokens, key tokens), like the rows sliced below.
            keys = hidden_states if encoder_hidden_states is None else encoder_hidden_states
            attention_mask = attn.prepare_attention_mask(attention_mask, keys.shape[1], batch)
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        if encoder_hidden_states is not None and attn.norm_cross:
            context = attn.norm_encoder_hidden_states(context)

        query = attn.to_q(hidden_states)
        key = attn.to_k(context)
        value = attn.to_v(context)
        head_dim = key.shape[-1] // attn.heads
        query, key, value = (
            t.view(batch, -1, attn.heads, head_dim).transpose(1, 2) for t in (query, key, value)
        )
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if attention_mask is None:
            out = F.scaled_dot_product_attention(query, key, value, scale=attn.scale)
        else:
            out = self._sliced(query, key, value, attention_mask, attn.scale)

        hidden_states = out.reshape(batch, attn.heads, -1, head_dim).transpose(1, 2)
        hidden_states = hidden_states.reshape(batch, -1, attn.heads * head_dim)
        hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))  # projection, dropout
        if input_ndim == 4:
            hidden_states = hidden_states.transpose(-1, -2).reshape(batch, channel, height, width)
        if attn.residual_connection:
            hidden_states = hidden_states + residual
        return hidden_states / attn.rescale_output_factor

    def _sliced(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        # (batch x heads, tokens, head_dim): the rows diffusers' slicing counts in.
        query, key, value = (t.reshape(-1, *t.shape[2:]) for t in (query, key, value))
        out = torch.empty_like(query)
        step = self.rows_per_call(
            query.shape[0], query.shape[1], key.shape[1], query.element_size()
        )
        for start in range(0, query.shape[0], step):
            rows = slice(start, start + step)
            # 4-d: with 3-d inputs torch falls back to its unfused (math) attention on CPU.
            q, k, v = (t[rows].unsqueeze(0) for t in (query, key, value))
            mask = attention_mask[rows].unsqueeze(0)
            out[rows] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)[0]
        return out


def use_fused_kernel_in_slices(model: torch.nn.Module) -> int:
    """Swaps each SlicedAttnProcessor in `model` for a same-size SlicedSdpaProcessor; returns the
    count.

    Other processors, such as added-KV ones, stay."""
    swapped = 0
    for module in model.modules():
        if isinstance(module, Attention) and type(module.processor) is SlicedAttnProcessor:
            module.set_processor(SlicedSdpaProcessor(module.processor.slice_size))
            swapped += 1
    return swapped
