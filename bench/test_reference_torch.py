"""Tests of bench/reference_torch.py's op counting and modes (run with the torch of
scripts/setup-libtorch.sh: `"$CONELAB_TORCH_PYTHON" -m unittest bench/test_reference_torch.py`).

The counts are checked against what PyTorch's own composition is known to be (aten::linear is one
top-level op whatever it calls inside), not against the script's output."""
import os
import subprocess
import json
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_torch as ref  # noqa: E402


def counted(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return ref.top_level_ops(prof.events())


class OpKinds(unittest.TestCase):
    def setUp(self):
        self.rules = ref.read_op_kinds()

    def test_kinds_by_name_and_prefix(self):
        k = lambda n: ref.kind_of(n, self.rules)  # noqa: E731
        self.assertEqual(k("aten::addmm"), "matmul")
        self.assertEqual(k("aten::_foreach_mul_"), "fused")
        self.assertEqual(k("aten::_scaled_dot_product_flash_attention_for_cpu"), "fused")
        self.assertEqual(k("aten::native_layer_norm_backward"), "fused")
        self.assertEqual(k("aten::sum"), "reduction")
        self.assertEqual(k("aten::view"), "view")
        self.assertEqual(k("aten::empty_strided"), "view")
        # Not listed: elementwise; a prefix rule does not match a longer plain name.
        self.assertEqual(k("aten::mul"), "elementwise")
        self.assertEqual(k("aten::summary_op"), "elementwise")

    def test_a_malformed_line_is_an_error(self):
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
            f.write("# comment\naten::mm matmul\n")
        try:
            with self.assertRaises(ValueError) as e:
                ref.read_op_kinds(f.name)
            self.assertIn(":2:", str(e.exception))
        finally:
            os.unlink(f.name)


class TopLevel(unittest.TestCase):
    def test_nested_ops_are_not_counted(self):
        x, w, b = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5)
        # aten::linear calls t and addmm inside: one top-level op. Then one sum.
        c = counted(lambda: F.linear(x, w, b).sum())
        self.assertEqual(c, {"aten::linear": 1, "aten::sum": 1})

    def test_ops_inside_a_backward_node_are_top_level(self):
        a = torch.randn(4, 3, requires_grad=True)
        b = torch.randn(3, 2)
        loss = (a @ b).sum()
        # The backward nodes are autograd functions, not ATen ops: the products they dispatch
        # count, as conelab's own backward products do.
        c = counted(loss.backward)
        self.assertGreaterEqual(c["aten::mm"], 1)
        self.assertNotIn("aten::matmul", c)

    def test_summary_adds_up(self):
        s = ref.op_summary({"aten::mm": 2, "aten::view": 3, "aten::mul": 4}, ref.read_op_kinds())
        self.assertEqual(s["total"], 9)
        self.assertEqual(s["kernels"], 6)
        self.assertEqual(s["by_kind"], {"elementwise": 4, "matmul": 2, "view": 3})
        self.assertEqual(list(s["by_name"]), ["aten::mul", "aten::view", "aten::mm"])


class Modes(unittest.TestCase):
    def run_ref(self, *args):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_torch.py")
        out = subprocess.run(
            [sys.executable, script, "--model", "tiny", "--steps", "1", "--warmup", "1",
             "--vocab", "200", "--batch", "2", "--bptt", "8", "--count-ops", "--json", *args],
            check=True, capture_output=True, text=True,
        ).stdout
        return json.loads(out)

    def test_fused_modes_dispatch_fewer_ops_than_composed(self):
        composed = self.run_ref("--mode", "composed")["ops"]
        fp32 = self.run_ref("--mode", "fp32")["ops"]
        # SDPA, fused layer norm and cross-entropy, multi-tensor AdamW and clipping.
        self.assertLess(fp32["kernels"], composed["kernels"])
        self.assertIn("aten::scaled_dot_product_attention", fp32["by_name"])
        self.assertNotIn("aten::scaled_dot_product_attention", composed["by_name"])
        self.assertTrue(any(n.startswith("aten::_foreach_") for n in fp32["by_name"]))
        self.assertFalse(any(n.startswith("aten::_foreach_") for n in composed["by_name"]))
        self.assertEqual(sum(fp32["by_kind"].values()), fp32["total"])

    def test_bf16_uses_the_fused_adamw(self):
        ops = self.run_ref("--mode", "bf16")["ops"]
        self.assertIn("aten::_fused_adamw_", ops["by_name"])


if __name__ == "__main__":
    unittest.main()
