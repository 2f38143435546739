"""compile_mask on the host for every workload of WORKLOADS.md (maskprep's speed)."""

import maskattn

from .common import ONE_SIZE, WORKLOADS, workloads

SIZES = [4096, 16384, 65536]


class CompileMask:
    params = [list(WORKLOADS), SIZES]
    param_names = ["workload", "n"]
    timeout = 300

    def setup(self, name, n):
        if name in ONE_SIZE and n != SIZES[0]:
            raise NotImplementedError("the MEDUSA tree has one size")
        self.spec = workloads.build(name, n, seed=0)
        maskattn.compile_mask(self.spec, (128, 128))

    def time_compile(self, name, n):
        self.spec._plans.clear()
        maskattn.compile_mask(self.spec, (128, 128), threads=1)

    def track_active_blocks(self, name, n):
        return maskattn.compile_mask(self.spec, (128, 128)).stats()["active_blocks"]

    track_active_blocks.unit = "blocks"


class CompileLong:
    """Interval masks at a million tokens."""

    params = [["doc_causal", "sink_swa", "shared_question"]]
    param_names = ["workload"]
    timeout = 300

    def setup(self, name):
        self.spec = workloads.build(name, 1 << 20, seed=0)

    def time_compile(self, name):
        self.spec._plans.clear()
        maskattn.compile_mask(self.spec, (128, 128))


class CompileDense:
    """A dense 16384 x 16384 boolean mask (the packed-documents mask, held densely)."""

    params = [[1, 2]]
    param_names = ["threads"]
    timeout = 300

    def setup(self, threads):
        self.spec = maskattn.masks.from_dense(workloads.build("doc_causal", 16384, seed=0).to_dense())

    def time_compile(self, threads):
        self.spec._plans.clear()
        maskattn.compile_mask(self.spec, (128, 128), threads=threads)


class CompileDecode:
    """Inference plans: one new token per sample over per-sample cache lengths, its rows repeated for GQA packing
    (4 query heads per KV head), and the MEDUSA mc_sim_7b_63 tree over a prefix; both on the 64 x 64 decode tile.
    A new cache length per step means a new plan per step, so this is per-token host time."""

    params = [["kv_cache", "tree"], [4096, 65536]]
    param_names = ["case", "context"]
    timeout = 300

    def setup(self, case, context):
        if case == "kv_cache":
            lengths = [context - 64 * b for b in range(8)]  # batch 8, ragged
            self.spec = maskattn.masks.kv_cache(1, lengths, n_k=context).repeat_rows(4)
        else:
            self.spec = maskattn.masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=context)

    def time_compile(self, case, context):
        self.spec._plans.clear()
        maskattn.compile_mask(self.spec, (64, 64), threads=1)
