"""FlexAttention block masks to and from maskattn plans (torch on the CPU), and FlashMask tensors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Flex interop needs torch")
torch_flex = pytest.importorskip("torch.nn.attention.flex_attention", reason="this torch has no FlexAttention")

import maskattn  # noqa: E402
from maskattn import masks  # noqa: E402


def flex_dense(block_mask):
    """Every element as Flex computes it: full blocks true, partial blocks by mask_mod, others false."""
    n_q, n_k = block_mask.seq_lengths
    bq, bkv = block_mask.BLOCK_SIZE
    out = np.zeros((n_q, n_k), bool)
    q = torch.arange(n_q)[:, None]
    kv = torch.arange(n_k)[None, :]
    inside = block_mask.mask_mod(torch.tensor(0), torch.tensor(0), q, kv).numpy()
    for nums, idxs, full in ((block_mask.kv_num_blocks, block_mask.kv_indices, False),
                             (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, True)):
        for m in range(nums.shape[-1]):
            for n in idxs[0, 0, m, : nums[0, 0, m]].tolist():
                rows, cols = slice(m * bq, (m + 1) * bq), slice(n * bkv, (n + 1) * bkv)
                out[rows, cols] = True if full else inside[rows, cols]
    return out


@pytest.mark.parametrize("spec", [
    masks.document([100, 60, 90], prefix=[30, 0, 10], n=300),
    masks.causal(200, 333),
    masks.bigbird(300, 32, seed=2),
    masks.medusa_tree([[0], [1], [0, 0], [0, 1]], prefix_len=150),
], ids=["intervals", "causal_kv", "bits", "tree"])
@pytest.mark.parametrize("tile", [(128, 128), (64, 32)])
def test_to_flex_block_mask_is_exact(spec, tile):
    plan = maskattn.compile_mask(spec, tile)
    block_mask = maskattn.flex.to_block_mask(plan, device="cpu")
    assert block_mask.BLOCK_SIZE == tile
    assert np.array_equal(flex_dense(block_mask), spec.to_dense()[0, 0])


def test_to_flex_block_mask_refuses_a_plan_in_its_own_order():
    plan = maskattn.compile_mask(masks.longformer(300, 20, global_tokens=3, dilation=2), (64, 64))
    assert plan.payload == "intervals" and plan.perm is not None
    with pytest.raises(ValueError, match="token order of its own"):
        maskattn.flex.to_block_mask(plan, device="cpu")


def test_from_flex_block_mask_round_trip():
    def doc_causal(b, h, q, kv):
        doc = torch.div(torch.as_tensor(q), 70, rounding_mode="floor")
        return (doc == torch.div(torch.as_tensor(kv), 70, rounding_mode="floor")) & (q >= kv)

    block_mask = torch_flex.create_block_mask(doc_causal, 1, 1, 300, 300, device="cpu")
    spec = maskattn.flex.from_block_mask(block_mask)
    expected = doc_causal(0, 0, torch.arange(300)[:, None], torch.arange(300)[None, :]).numpy()
    assert np.array_equal(spec.to_dense()[0, 0], expected)
    for tile in [(128, 128), (32, 48)]:
        plan = maskattn.compile_mask(spec, tile)
        assert np.array_equal(plan.to_dense()[0, 0], expected)


def test_from_flex_block_mask_trusts_full_blocks():
    # a block mask whose full blocks disagree with its mask_mod: Flex never evaluates mask_mod there
    block_mask = torch_flex.create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 256, 256, device="cpu")
    block_mask.mask_mod = lambda b, h, q, kv: q < 0
    dense = maskattn.flex.from_block_mask(block_mask).to_dense()[0, 0]
    assert dense[128:, :128].all() and not dense[:128, :128].any()


def test_from_flex_block_mask_rejects_batched_masks():
    block_mask = torch_flex.create_block_mask(lambda b, h, q, kv: q >= kv, 2, 1, 128, 128, device="cpu")
    with pytest.raises(ValueError, match="B=2"):
        maskattn.flex.from_block_mask(block_mask)


def test_flashmask_startend_row_indices_as_torch_tensor():
    se = torch.tensor([[[[3], [5], [5], [4], [5]]]], dtype=torch.int32)
    spec = masks.from_intervals(se, causal=True)
    np_spec = masks.from_intervals(se.numpy(), causal=True)
    assert np.array_equal(spec.to_dense(), np_spec.to_dense())
