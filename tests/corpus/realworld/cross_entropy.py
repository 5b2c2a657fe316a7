"""Cross-entropy forward over large vocabularies: 64-bit row offsets, two passes over the row."""
import triton
import triton.language as tl


@triton.jit
def cross_entropy_fwd(logits_ptr, labels_ptr, loss_ptr, lse_ptr, n_cols, stride, ignore_index,
                      BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    logits_ptr += row.to(tl.int64) * stride
    label = tl.load(labels_ptr + row)
    m = -float("inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(logits_ptr + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(d)
    target = tl.load(logits_ptr + label).to(tl.float32)
    loss = tl.where(label == ignore_index, 0.0, lse - target)
    tl.store(loss_ptr + row, loss)
    tl.store(lse_ptr + row, lse)


def cross_entropy(logits, labels, loss, lse, ignore_index=-100):
    n_rows, n_cols = logits.shape
    cross_entropy_fwd[(n_rows,)](logits, labels, loss, lse, n_cols, logits.stride(0), ignore_index,
                                 BLOCK_SIZE=4096, num_warps=16)
