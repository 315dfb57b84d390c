"""Tests of bench/ncu_summary.py (plain python3, no torch: `python3 -m unittest bench/test_ncu_summary.py`).

The log below is written by hand in ncu's --csv form, so the expected counts and milliseconds are
counted here, not taken from the script."""
import lzma
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_summary as ns  # noqa: E402

HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
)


def row(i, name, ns_):
    return (
        f'"{i}","1","conelab","h","{name}","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0",'
        f'"Command line profiler metrics","gpu__time_duration.sum","ns","{ns_}"\n'
    )


LOG = (
    "==PROF== Connected to process 1 (conelab)\n"
    + HEADER
    + row(0, "void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>>(int)", "2,080")
    + row(1, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8", "1,000,000")
    + row(2, "void at::reduce_kernel<128, 4, at::ReduceOp<float, sum>>", "500")
    + row(3, "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "40,000")
    + row(4, "void at::<unnamed>::multi_tensor_apply_kernel<at::FusedAdamMathFunctor>", "30,000")
    + row(5, "void at::<unnamed>::cunn_SoftMaxForward<4, float>", "20,000")
    + row(6, "a_kernel_nobody_foresaw", "7")
    + "==PROF== Disconnected from process 1\n"
)


class NcuSummary(unittest.TestCase):
    def write(self, text, xz=False):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "log.csv" + (".xz" if xz else ""))
        with (lzma.open(path, "wt") if xz else open(path, "w")) as f:
            f.write(text)
        return path

    def test_kinds_launches_and_milliseconds(self):
        for xz in (False, True):
            s = ns.summarise(ns.read_kernels(self.write(LOG, xz)))
            self.assertEqual(s["elementwise"], [1, 0.00208])
            self.assertEqual(s["matmul (GEMM)"], [1, 1.0])
            self.assertEqual(s["reductions"], [1, 0.0005])
            self.assertEqual(s["attention (fused)"][0], 1)
            self.assertEqual(s["optimizer and clipping (foreach / fused)"][0], 1)
            self.assertEqual(s["softmax / cross-entropy (fused)"][0], 1)
            # An unknown kernel is counted, as other, not dropped.
            self.assertEqual(s["other"], [1, 7e-6])
            self.assertEqual(sum(c[0] for c in s.values()), 7)

    def test_table_totals(self):
        s = ns.summarise(ns.read_kernels(self.write(LOG)))
        t = ns.table([s, s], ["a", "b"])
        self.assertIn("| **all** | **7** | **1.09** | **7** | **1.09** |", t)
        self.assertNotIn("layer norm", t)  # a kind neither log has is left out

    def test_not_an_ncu_log_is_one_line(self):
        self.assertEqual(ns.main([self.write("no csv here\n")]), 1)
        self.assertEqual(ns.main([self.write('"a","b"\n"1","2"\n')]), 1)
        self.assertEqual(ns.main(["/nonexistent/log.csv"]), 1)


if __name__ == "__main__":
    unittest.main()
