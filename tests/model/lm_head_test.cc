// The chunked LM head (model/lm_head.h): its log-probs are the unchunked head's bit for bit, dW is
// the unsliced GEMM's over the rows with a gradient bit for bit, and dx (summed over vocabulary
// slices) matches the exact gradient within a derived tolerance; BF16 and FP32 heads, a real
// vocabulary size.
// ctest-file-label: quick
#include "model/lm_head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/gemm/gemm.h"
#include "kernels/elementwise/logprob.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

class LmHead : public ::testing::TestWithParam<Precision> {};

// Random head weights [V, C], inputs [N, C] rounded to BF16 (as the final norm's output is) and
// dlogprob [N], drawn from `seed`.
struct HeadInputs {
  std::vector<float> w, x, dlp;
};
HeadInputs random_head_inputs(int64_t V, int64_t C, int64_t N, uint64_t seed) {
  HeadInputs in{std::vector<float>(static_cast<size_t>(V * C)), std::vector<float>(static_cast<size_t>(N * C)),
                std::vector<float>(static_cast<size_t>(N))};
  fill_normal(in.w.data(), V * C, 0.0f, 0.5f, seed, 0);
  fill_normal(in.x.data(), N * C, 0.0f, 1.0f, seed, 1);
  fill_normal(in.dlp.data(), N, 0.0f, 1.0f, seed, 2);
  for (float& e : in.x) e = bf16_to_f32(f32_to_bf16(e));
  return in;
}

// ctest-label: slow
TEST_P(LmHead, ChunksGiveTheUnchunkedBits) {
  const Precision precision = GetParam();
  // 151,936 columns: forward chunks of 110 rows (two chunks for 150 rows), 75 backward slices
  // (the last partial).
  const int64_t V = 151936, C = 64, N = 150;
  std::vector<float> w(static_cast<size_t>(V * C)), x(static_cast<size_t>(N * C));
  fill_normal(w.data(), V * C, 0.0f, 0.5f, 3, 0);
  fill_normal(x.data(), N * C, 0.0f, 1.0f, 3, 1);
  if (precision == Precision::kBF16)
    for (float& e : x) e = bf16_to_f32(f32_to_bf16(e));  // the final norm's output is BF16
  Linear head("lm_head.weight", V, C, precision, ScaleFormat::kFp32, ScaleFormat::kFp32, false);
  head.refresh_weights(w.data());
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) targets[static_cast<size_t>(n)] = n % 7 == 3 ? -1 : static_cast<int32_t>((n * 7919) % V);
  std::vector<float> dlp(static_cast<size_t>(N));
  fill_normal(dlp.data(), N, 0.0f, 1.0f, 3, 2);

  LmHeadScratch scratch;
  std::vector<float> lp(static_cast<size_t>(N)), lse(static_cast<size_t>(N));
  lm_head_logprobs_forward(head, x.data(), N, targets.data(), lp.data(), lse.data(), scratch);
  // The unchunked head: all logits, then the log-probs.
  std::vector<float> logits(static_cast<size_t>(N * V));
  lm_head_logits(head, x.data(), N, logits.data(), scratch);
  std::vector<float> lp_full(static_cast<size_t>(N)), lse_full(static_cast<size_t>(N));
  token_logprobs_forward(lp_full.data(), lse_full.data(), logits.data(), V, targets.data(), N, V);
  EXPECT_EQ(std::memcmp(lp.data(), lp_full.data(), 4 * N), 0);
  EXPECT_EQ(std::memcmp(lse.data(), lse_full.data(), 4 * N), 0);

  std::vector<float> dx(static_cast<size_t>(N * C)), dw(static_cast<size_t>(V * C), 0.0f);
  lm_head_logprobs_backward(head, x.data(), N, targets.data(), lse.data(), dlp.data(), dx.data(), false, dw.data(),
                            /*accumulate_dw=*/true, scratch);
  // Written instead of added (the first micro-batch after zero_grads): the bits of 0 + product,
  // whatever dw held.
  std::vector<float> dw_written(static_cast<size_t>(V * C), std::nanf("")), dx_again(dx.size());
  lm_head_logprobs_backward(head, x.data(), N, targets.data(), lse.data(), dlp.data(), dx_again.data(), false,
                            dw_written.data(), /*accumulate_dw=*/false, scratch);
  EXPECT_EQ(std::memcmp(dw_written.data(), dw.data(), 4 * V * C), 0);
  EXPECT_EQ(std::memcmp(dx_again.data(), dx.data(), 4 * N * C), 0);
  // dW: the unsliced wgrad GEMM, as Linear::backward runs it, over the rows with a target (the
  // others' dlogits are zero and take no part).
  std::vector<float> dl(static_cast<size_t>(N * V)), dw_full(static_cast<size_t>(V * C), 0.0f);
  token_logprobs_backward(dl.data(), logits.data(), V, 0, V, lse.data(), dlp.data(), targets.data(), N);
  std::vector<float> dl_rows, x_rows;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[static_cast<size_t>(n)] < 0) continue;
    dl_rows.insert(dl_rows.end(), dl.begin() + n * V, dl.begin() + (n + 1) * V);
    x_rows.insert(x_rows.end(), x.begin() + n * C, x.begin() + (n + 1) * C);
  }
  const int64_t R = static_cast<int64_t>(x_rows.size()) / C;
  if (precision == Precision::kBF16) {
    std::vector<bf16_t> dlb(dl_rows.size()), xb(x_rows.size());
    bf16_encode_f32(dl_rows.data(), dlb.data(), R * V);
    bf16_encode_f32(x_rows.data(), xb.data(), R * C);
    gemm_tn_bf16(V, C, R, dlb.data(), V, xb.data(), C, dw_full.data(), C, true);
  } else {
    gemm_tn_f32(V, C, R, dl_rows.data(), V, x_rows.data(), C, dw_full.data(), C, true);
  }
  EXPECT_EQ(std::memcmp(dw.data(), dw_full.data(), 4 * V * C), 0);
  // dx against the exact product sum_v dlogits[n, v] W[v, c] in double (of the BF16-rounded
  // dlogits and W for a BF16 head): FP32 sums of 151,936 terms, whose rounding errors add up to
  // about sqrt(V) * 2^-24 = 2.3e-5 of sum |terms| when their signs are random; 1e-4 allows 4x.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; c += 7) {
      double want = 0, mag = 0;
      for (int64_t v = 0; v < V; ++v) {
        double d = dl[static_cast<size_t>(n * V + v)], wv = w[static_cast<size_t>(v * C + c)];
        if (precision == Precision::kBF16) {
          d = bf16_to_f32(f32_to_bf16(static_cast<float>(d)));
          wv = bf16_to_f32(f32_to_bf16(static_cast<float>(wv)));
        }
        want += d * wv;
        mag += std::fabs(d * wv);
      }
      ASSERT_NEAR(dx[static_cast<size_t>(n * C + c)], want, 1e-4 * mag + 1e-12) << "row " << n << " column " << c;
    }
}

// Rows without a gradient (no target, or dlogprob 0 as in a group whose advantages are all zero)
// take no part in the backward: the others' dx and dW are those of a batch of just those rows, bit
// for bit, theirs is 0 (or dx as it was, accumulating), and a batch without any gradient writes
// zeros or leaves dx and dW alone.
TEST_P(LmHead, RowsWithoutAGradientTakeNoPart) {
  const Precision precision = GetParam();
  const int64_t V = 5000, C = 64, N = 40;  // two full 2,048-column slices and a partial one
  HeadInputs in = random_head_inputs(V, C, N, 7);
  const std::vector<float>& w = in.w;
  const std::vector<float>& x = in.x;
  std::vector<float>& dlp = in.dlp;
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    targets[static_cast<size_t>(n)] = n < 6 || n % 9 == 4 ? -1 : static_cast<int32_t>((n * 997) % V);
    if (n % 5 == 2) dlp[static_cast<size_t>(n)] = n % 2 ? 0.0f : -0.0f;
  }
  Linear head("lm_head.weight", V, C, precision, ScaleFormat::kFp32, ScaleFormat::kFp32, false);
  head.refresh_weights(w.data());
  LmHeadScratch scratch;
  std::vector<float> lp(static_cast<size_t>(N)), lse(static_cast<size_t>(N));
  lm_head_logprobs_forward(head, x.data(), N, targets.data(), lp.data(), lse.data(), scratch);
  std::vector<float> dx_in(static_cast<size_t>(N * C)), dw_in(static_cast<size_t>(V * C));
  fill_normal(dx_in.data(), N * C, 0.0f, 1.0f, 7, 3);
  fill_normal(dw_in.data(), V * C, 0.0f, 1.0f, 7, 4);

  // The rows with a gradient as a batch of their own.
  std::vector<int64_t> rows;
  std::vector<float> x_r, dx_r, lse_r, dlp_r;
  std::vector<int32_t> t_r;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[static_cast<size_t>(n)] < 0 || dlp[static_cast<size_t>(n)] == 0.0f) continue;
    rows.push_back(n);
    x_r.insert(x_r.end(), x.begin() + n * C, x.begin() + (n + 1) * C);
    dx_r.insert(dx_r.end(), dx_in.begin() + n * C, dx_in.begin() + (n + 1) * C);
    t_r.push_back(targets[static_cast<size_t>(n)]);
    lse_r.push_back(lse[static_cast<size_t>(n)]);
    dlp_r.push_back(dlp[static_cast<size_t>(n)]);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  ASSERT_GT(R, 0);
  ASSERT_LT(R, N - 10);
  for (const bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulating" : "writing");
    std::vector<float> dx = accumulate ? dx_in : std::vector<float>(dx_in.size(), std::nanf(""));
    std::vector<float> dw = accumulate ? dw_in : std::vector<float>(dw_in.size(), std::nanf(""));
    lm_head_logprobs_backward(head, x.data(), N, targets.data(), lse.data(), dlp.data(), dx.data(), accumulate,
                              dw.data(), accumulate, scratch);
    std::vector<float> dx_alone = accumulate ? dx_r : std::vector<float>(dx_r.size());
    std::vector<float> dw_alone = accumulate ? dw_in : std::vector<float>(dw_in.size());
    lm_head_logprobs_backward(head, x_r.data(), R, t_r.data(), lse_r.data(), dlp_r.data(), dx_alone.data(), accumulate,
                              dw_alone.data(), accumulate, scratch);
    EXPECT_EQ(std::memcmp(dw.data(), dw_alone.data(), 4 * V * C), 0);
    for (int64_t n = 0, r = 0; n < N; ++n) {
      const bool has = r < R && rows[static_cast<size_t>(r)] == n;
      const float* want = has ? dx_alone.data() + r++ * C : accumulate ? dx_in.data() + n * C : nullptr;
      for (int64_t c = 0; c < C; ++c) {
        const float got = dx[static_cast<size_t>(n * C + c)], expected = want ? want[c] : 0.0f;
        ASSERT_EQ(std::memcmp(&got, &expected, 4), 0)
            << "row " << n << " column " << c << ": " << got << " vs " << expected;
      }
    }
    // No row with a gradient: zeros written, or dx and dW as they were.
    const std::vector<float> none(static_cast<size_t>(N), 0.0f);
    lm_head_logprobs_backward(head, x.data(), N, targets.data(), lse.data(), none.data(), dx.data(), accumulate,
                              dw.data(), accumulate, scratch);
    const std::vector<float> dx_before = dx, dw_before = dw;
    if (!accumulate) {
      EXPECT_EQ(dx, std::vector<float>(dx.size(), 0.0f));
      EXPECT_EQ(dw, std::vector<float>(dw.size(), 0.0f));
    }
    lm_head_logprobs_backward(head, x.data(), N, targets.data(), lse.data(), none.data(), dx.data(), true, dw.data(),
                              true, scratch);
    EXPECT_EQ(std::memcmp(dx.data(), dx_before.data(), 4 * N * C), 0);
    EXPECT_EQ(std::memcmp(dw.data(), dw_before.data(), 4 * V * C), 0);
  }
}

// The trainer's head keeps no BF16 copy (Linear::drop_bf16_copy): the rows it encodes from the
// master block by block give the copy's bits in the forward, the backward and the logits.
TEST(LmHeadWithoutCopy, GivesTheCopysBits) {
  const int64_t V = 5000, C = 64, N = 40;  // two full 2,048-column slices and a partial one
  const HeadInputs in = random_head_inputs(V, C, N, 5);
  const std::vector<float>& w = in.w;
  const std::vector<float>& x = in.x;
  const std::vector<float>& dlp = in.dlp;
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n)
    targets[static_cast<size_t>(n)] = n % 5 == 0 ? -1 : static_cast<int32_t>((n * 997) % V);
  struct Out {
    std::vector<float> lp, lse, dx, dw, logits;
  };
  const auto run = [&](bool copy) {
    Linear head("lm_head.weight", V, C, Precision::kBF16, ScaleFormat::kFp32, ScaleFormat::kFp32, false);
    if (!copy) head.drop_bf16_copy();
    head.refresh_weights(w.data());
    EXPECT_EQ(head.bf16_weights().empty(), !copy);
    LmHeadScratch scratch;
    Out o{std::vector<float>(N), std::vector<float>(N), std::vector<float>(N * C), std::vector<float>(V * C),
          std::vector<float>(N * V)};
    lm_head_logprobs_forward(head, x.data(), N, targets.data(), o.lp.data(), o.lse.data(), scratch);
    lm_head_logprobs_backward(head, x.data(), N, targets.data(), o.lse.data(), dlp.data(), o.dx.data(), false,
                              o.dw.data(), false, scratch);
    lm_head_logits(head, x.data(), N, o.logits.data(), scratch);
    if (!copy) {
      LinearCache cache;
      EXPECT_NE(testing::error_message([&] { head.forward(o.logits.data(), x.data(), N, cache); }).find("no BF16 copy"),
                std::string::npos);
    }
    return o;
  };
  const Out with = run(true), without = run(false);
  EXPECT_EQ(with.lp, without.lp);
  EXPECT_EQ(with.lse, without.lse);
  EXPECT_EQ(std::memcmp(with.dx.data(), without.dx.data(), 4 * with.dx.size()), 0);
  EXPECT_EQ(std::memcmp(with.dw.data(), without.dw.data(), 4 * with.dw.size()), 0);
  EXPECT_EQ(std::memcmp(with.logits.data(), without.logits.data(), 4 * with.logits.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Precisions, LmHead, ::testing::Values(Precision::kBF16, Precision::kF32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace fp8rl
