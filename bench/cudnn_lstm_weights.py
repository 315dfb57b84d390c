"""Does cuDNN's LSTM take a transposed (non-contiguous) weight? The question behind conelab's
contiguous LSTM leaves (crates/train/csrc/island.cpp): burn keeps a gate's weight as [D, 4H], the
node hands it to aten::lstm as a [4H, D] view. Prints one line per case; run on a CUDA machine."""
import torch

B, T, D, H = 4, 5, 8, 6
dev = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(B, T, D, device=dev)
h0 = torch.zeros(1, B, H, device=dev)
c0 = torch.zeros(1, B, H, device=dev)
b = [torch.randn(4 * H, device=dev) for _ in range(2)]
cases = {
    "contiguous weights": [torch.randn(4 * H, D, device=dev), torch.randn(4 * H, H, device=dev)],
    "transposed weights": [torch.randn(D, 4 * H, device=dev).t(), torch.randn(H, 4 * H, device=dev).t()],
}
for name, w in cases.items():
    for p in w + b:
        p.requires_grad_(True)
    try:
        out, _, _ = torch.lstm(x, (h0, c0), [w[0], w[1], b[0], b[1]], True, 1, 0.0, True, False, True)
        out.sum().backward()
        print(f"{dev} {name}: ok")
    except RuntimeError as e:
        print(f"{dev} {name}: refused: {str(e).splitlines()[0]}")
