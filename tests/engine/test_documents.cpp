// Packed documents (data.kind = documents, docs/LONG_SEQUENCES.md#packed-documents): the
// packing rule by hand, the batch's labels and document starts, the refusals, the masked
// kernels against a naive fp64 reference, and the main claim: a packed sequence with the
// document mask trains exactly as its documents one by one. The packed loss (token-weighted)
// and every gradient of step 0 equal those of separate one-document runs of a single-process
// model (1e-5 relative, float32) at sp 1, 2 and 4, ring 2 (zigzag and contiguous), head_chunks
// 2, with activation checkpointing, tiled MLP and loss, ZeRO-1, the blocked and the SDPA kernel.
// Checked by hand (docs/LONG_SEQUENCES.md#packed-documents): without the mask the gradients are
// 95% off; RoPE positions restarting per shard instead of per document are 13-60% off. Global
// positions instead of per-document ones change nothing beyond fp32 noise: RoPE scores depend
// on position differences only, and the mask keeps every difference inside one document.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/documents_fixture.hpp"
#include "cost_model.hpp"
#include "data.hpp"
#include "document_mask.hpp"
#include "documents.hpp"
#include "local_attention.hpp"
#include "meta_dry_run.hpp"
#include "torch_compat.hpp"
#include "rank_threads.hpp"
#include "trainer.hpp"

using namespace ulysses;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/ulysses_documents_XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

struct TempDir {
  std::string path = temp_dir();
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Documents of the given lengths, ids from a fixed pseudo-random walk below `vocab`.
std::vector<std::vector<int64_t>> make_docs(const std::vector<int64_t>& lengths, int64_t vocab) {
  std::vector<std::vector<int64_t>> docs;
  uint64_t s = 12345;
  for (const int64_t L : lengths) {
    std::vector<int64_t> d;
    for (int64_t i = 0; i < L; ++i) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      d.push_back(static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(vocab)));
    }
    docs.push_back(d);
  }
  return docs;
}

}  // namespace

// Next-fit in file order; a document longer than N cut into pieces of N and a remainder.
TEST(Documents, PackingRuleByHand) {
  // lengths 5, 3, 20, 4, 7 at N = 8: [0,5)+[5,8) | [8,16) | [16,24) | [24,28)+[28,32) | [32,39) + 1 padding
  std::vector<int64_t> seqs, borders;
  pack_documents({0, 5, 8, 28, 32, 39}, 8, &seqs, &borders);
  EXPECT_EQ(seqs, (std::vector<int64_t>{0, 8, 16, 24, 32, 39}));
  EXPECT_EQ(borders, (std::vector<int64_t>{0, 5, 8, 16, 24, 28, 32, 39}));
  // An empty document packs nothing; a document of exactly N fills a sequence.
  pack_documents({0, 3, 3, 11, 12}, 8, &seqs, &borders);
  EXPECT_EQ(seqs, (std::vector<int64_t>{0, 3, 11, 12}));
  EXPECT_EQ(borders, (std::vector<int64_t>{0, 3, 11, 12}));
  // Attention kept: sequences of 8 holding documents 5+3 (15+6 of 36 pairs), ...
  const double f = packed_attention_fraction({0, 5, 8}, 8);
  EXPECT_NEAR(f, (15.0 + 6.0) / 36.0, 1e-12);
  EXPECT_NEAR(packed_attention_fraction({0, 8, 16}, 8), 1.0, 1e-12);
}

// Ids, labels (-100 at the last token of each document and on padding) and document starts.
TEST(Documents, BatchLabelsAndStarts) {
  TempDir dir;
  const auto docs = make_docs({5, 3, 20, 4, 7}, 50);
  test::write_documents_folder(dir.path, docs, 50);
  DocumentTokens src(read_documents_manifest(dir.path), 8, 64);
  ASSERT_EQ(src.sequences(), 5);
  std::vector<int64_t> ids(8), labels(8), start(8);
  src.fill(3, ids.data(), labels.data(), start.data());  // the 20-token document's last 4 tokens, then 4 tokens
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ids[t], docs[2][16 + t]);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ids[4 + t], docs[3][t]);
  EXPECT_EQ(start, (std::vector<int64_t>{0, 0, 0, 0, 4, 4, 4, 4}));
  EXPECT_EQ(labels, (std::vector<int64_t>{docs[2][17], docs[2][18], docs[2][19], -100, docs[3][1], docs[3][2],
                                          docs[3][3], -100}));
  src.fill(4, ids.data(), labels.data(), start.data());  // 7 tokens and one padding token
  EXPECT_EQ(start, (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 7}));
  EXPECT_EQ(ids[7], 0);
  EXPECT_EQ(labels[6], -100);
  EXPECT_EQ(labels[7], -100);
  // Through make_batch: a function of (seed, step, sequence index) only.
  const Batch a = make_batch(src, 8, 3, 0, 4, 7), b = make_batch(src, 8, 3, 2, 2, 7);
  ASSERT_TRUE(a.doc_start.defined());
  EXPECT_TRUE(a.ids.narrow(0, 2, 2).equal(b.ids));
  EXPECT_TRUE(a.labels.narrow(0, 2, 2).equal(b.labels));
  EXPECT_TRUE(a.doc_start.narrow(0, 2, 2).equal(b.doc_start));
  // RoPE positions restart at every document.
  const DocumentMask m(torch::tensor({0, 0, 0, 3, 3, 5}, torch::kLong).view({1, 6}));
  EXPECT_TRUE(m.positions(torch::arange(2, 6, torch::kLong)).equal(torch::tensor({{2, 0, 1, 0}}, torch::kLong)));
}

// Refused before training: a model vocabulary below the data's, a token id at or above it.
// What the trace records per shard (ULYSSES_DOCUMENTS, document_shards), by hand: documents of
// 5, 0 (empty), 3, 20, 4 and 7 tokens at N = 8 pack as [0,5)+[5,8) | 20 cut into 8, 8, 4 (+4) |
// 7 + padding; an empty document is never named, a cut one says where its part starts.
TEST(Documents, ShardRowsNameTheDocumentsByHand) {
  TempDir dir;
  test::write_documents_folder(dir.path, make_docs({5, 0, 3, 20, 4, 7}, 50), 50);
  DocumentTokens src(read_documents_manifest(dir.path), 8, 64);
  ASSERT_EQ(src.sequences(), 5);
  using P = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;  // document, length, offset, begin, end
  auto parts = [&](int64_t k) {
    std::vector<P> v;
    for (const auto& p : src.parts(k)) v.emplace_back(p.document, p.doc_tokens, p.doc_offset, p.begin, p.end);
    return v;
  };
  EXPECT_EQ(parts(0), (std::vector<P>{{0, 5, 0, 0, 5}, {2, 3, 0, 5, 8}}));
  EXPECT_EQ(parts(1), (std::vector<P>{{3, 20, 0, 0, 8}}));
  EXPECT_EQ(parts(3), (std::vector<P>{{3, 20, 16, 0, 4}, {4, 4, 0, 4, 8}}));
  EXPECT_EQ(parts(4), (std::vector<P>{{5, 7, 0, 0, 7}, {-1, 1, 0, 7, 8}}));
  // Sequences 0 and 3 for a rank holding [2, 6): the parts its piece overlaps.
  const auto rows = document_shards(src, {0, 3}, 10, 6, {{2, 6}});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(std::tie(rows[0].sequence, rows[0].packed, rows[0].step, rows[0].document, rows[0].begin, rows[0].end),
            std::make_tuple(int64_t{10}, int64_t{0}, int64_t{6}, int64_t{0}, int64_t{0}, int64_t{5}));
  EXPECT_EQ(rows[0].held_begin(), 2);
  EXPECT_EQ(rows[1].document, 2);
  EXPECT_EQ(std::tie(rows[2].sequence, rows[2].document, rows[2].doc_offset, rows[2].begin, rows[2].end),
            std::make_tuple(int64_t{11}, int64_t{3}, int64_t{16}, int64_t{0}, int64_t{4}));
  EXPECT_EQ(rows[2].held_end(), 4);
  EXPECT_EQ(rows[3].document, 4);
}

TEST(Documents, RefusesVocabularyMismatch) {
  TempDir dir;
  test::write_documents_folder(dir.path, make_docs({12, 30}, 64), 64);
  RunConfig c;
  c.model.vocab_size = 48;
  c.train.seq_length = 16;
  c.data.kind = "documents";
  c.data.path = dir.path;
  try {
    TokenSource::open(c.data, c.model, 16, 1);
    FAIL() << "a model vocabulary of 48 for data of 64 ids was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size (48) is smaller"), std::string::npos) << e.what();
  }
  auto issues = validate_with_files(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].field, "model.vocab_size");

  auto bad = make_docs({12, 30}, 64);
  bad[1][7] = 70;  // token 19 of the stream
  test::write_documents_folder(dir.path, bad, 64);
  c.model.vocab_size = 128;
  try {
    TokenSource::open(c.data, c.model, 16, 1);
    FAIL() << "a token id of 70 in data of 64 ids was accepted";
  } catch (const ConfigError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(dir.path + "/tokens.bin: token 19 is 70"), std::string::npos) << w;
  }
  issues = validate_with_files(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues[0].message.find("tokens.bin: token 19 is 70"), std::string::npos) << issues[0].message;
  // A folder that is not a prepared one.
  c.data.path = dir.path + "/tokens.bin";
  issues = validate_with_files(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues[0].message.find("is not a folder"), std::string::npos) << issues[0].message;
}

// The cost model counts attention FLOPs times the share of causal pairs the packing keeps.
TEST(Documents, CostModelCountsTheMaskSaving) {
  TempDir dir;
  test::write_documents_folder(dir.path, make_docs({5, 3, 20, 4, 7}, 50), 50);
  RunConfig c;
  c.model.vocab_size = 64;
  c.train.seq_length = 8;
  const cost::CostEstimate whole = cost::estimate(c);
  c.data.kind = "documents";
  c.data.path = dir.path;
  const cost::CostEstimate packed = cost::estimate(c);
  // sequences [5 3] [8] [8] [4 4] [7 + 1 padding]: (15+6 + 36 + 36 + 10+10 + 28+1) / (5 x 36)
  const double kept = (15.0 + 6 + 36 + 36 + 10 + 10 + 28 + 1) / (5 * 36.0);
  EXPECT_NEAR(packed.attention_fraction, kept, 1e-12);
  EXPECT_NEAR(packed.attention_flops_per_step, whole.attention_flops_per_step * kept,
              1e-9 * whole.attention_flops_per_step);
  EXPECT_EQ(packed.dense_flops_per_step, whole.dense_flops_per_step);
}

namespace {

// Naive document-causal attention in fp64: softmax(q k^T / sqrt(dh) + mask) v, kv heads repeated.
at::Tensor naive_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const DocumentMask& m) {
  const int64_t G = q.size(1) / k.size(1), N = q.size(2);
  auto kr = k.repeat_interleave(G, 1), vr = v.repeat_interleave(G, 1);
  auto s = at::matmul(q, kr.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  s = s.masked_fill(m.masked(0, N, 0, N, q.device()).unsqueeze(1), -INFINITY);
  return at::matmul(at::softmax(s, -1), vr);
}

}  // namespace

// The blocked kernel (blocks that do and do not divide N) and SDPA under the document mask,
// forward and gradients, against the naive reference; rows of the batch hold other documents.
TEST(Documents, MaskedKernelsMatchNaiveReference) {
  torch::manual_seed(3);
  const int64_t B = 2, H = 4, Hkv = 2, N = 24, dh = 8;
  auto start = torch::tensor({0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 19, 19, 21, 21, 21,  //
                              0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  2,  2,  2},
                             torch::kLong)
                   .view({B, N});
  const DocumentMask m(start);
  auto q = torch::randn({B, H, N, dh}, torch::kDouble), k = torch::randn({B, Hkv, N, dh}, torch::kDouble);
  auto v = torch::randn({B, Hkv, N, dh}, torch::kDouble), go = torch::randn({B, H, N, dh}, torch::kDouble);
  auto grads = [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& f) {
    auto qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true), vv = v.clone().requires_grad_(true);
    auto o = f(qq, kk, vv);
    o.backward(go);
    return std::vector<at::Tensor>{o.detach(), qq.grad(), kk.grad(), vv.grad()};
  };
  const auto ref = grads([&](auto& a, auto& b, auto& c) { return naive_attention(a, b, c, m); });
  for (const int64_t block : {4, 5, 64}) {
    AttentionKernel kern;
    kern.kind = AttentionKernel::Kind::Blocked;
    kern.block = block;
    const auto got = grads([&](auto& a, auto& b, auto& c) { return causal_attention(a, b, c, kern, &m); });
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LT((got[i] - ref[i]).abs().max().item<double>(), 1e-10) << "blocked " << block << " output/grad " << i;
  }
  AttentionKernel sdpa;
  sdpa.kind = AttentionKernel::Kind::Sdpa;
  const auto got = grads([&](auto& a, auto& b, auto& c) { return causal_attention(a, b, c, sdpa, &m); });
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LT((got[i] - ref[i]).abs().max().item<double>(), 1e-10) << "sdpa output/grad " << i;
  // The mask matters here: plain causal attention is far off.
  const auto causal = grads([&](auto& a, auto& b, auto& c) { return causal_attention(a, b, c, sdpa); });
  EXPECT_GT((causal[0] - ref[0]).abs().max().item<double>(), 1e-2);
}

namespace {

RunConfig packed_config(const std::string& dir, int64_t sp, int64_t ring, bool zigzag, int64_t chunks) {
  RunConfig c;
  c.model.vocab_size = 64;
  c.model.hidden_size = 32;  // 4 heads of 8
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 2;
  c.model.num_attention_heads = 4;
  c.model.num_key_value_heads = 2;
  c.parallel.sp_size = sp;
  c.parallel.ring_size = ring;
  c.parallel.ring_zigzag = zigzag;
  c.parallel.head_chunks = chunks;
  c.parallel.timeout_s = 60;
  c.train.seq_length = 32;
  c.train.micro_batch_size = 2;
  c.train.steps = 1;
  c.train.attention = "blocked";
  c.train.attention_block = 4;
  c.data.kind = "documents";
  c.data.path = dir;
  c.profile.enabled = false;
  return c;
}

struct Reference {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
  int64_t documents = 0;  // documents with a label in the batch
};

// Each document of step 0's batch run alone through a single-process model (no mask, positions
// from 0), the loss sums and gradients added up and divided by the token count.
Reference separate_documents(const RunConfig& cfg) {
  const auto src = TokenSource::open(cfg.data, cfg.model, cfg.train.seq_length, static_cast<uint64_t>(cfg.train.seed));
  const Batch batch =
      make_batch(*src, cfg.train.seq_length, 0, 0, cfg.train.micro_batch_size, static_cast<uint64_t>(cfg.train.seed));
  LlamaModel model(cfg.model, ParallelConfig{}, torch::kFloat32, nullptr);
  model.init_parameters(static_cast<uint64_t>(cfg.train.seed));
  Reference r;
  at::Tensor total = torch::zeros({}, torch::kFloat32);
  int64_t count = 0;
  for (int64_t b = 0; b < batch.ids.size(0); ++b) {
    const auto st = batch.doc_start[b];
    const int64_t N = batch.ids.size(1);
    for (int64_t s = 0; s < N;) {
      int64_t e = s + 1;
      while (e < N && st[e].item<int64_t>() == s) ++e;
      const auto labels = batch.labels[b].narrow(0, s, e - s).unsqueeze(0);
      const int64_t valid = (labels != -100).sum().item<int64_t>();
      if (valid > 0) {
        total = total + model.forward_loss_sum(batch.ids[b].narrow(0, s, e - s).unsqueeze(0), labels, 0);
        count += valid;
        ++r.documents;
      }
      s = e;
    }
  }
  total.backward();
  r.loss = total.item<double>() / static_cast<double>(count);
  for (auto& [n, p] : model.named_parameters()) r.grads[n] = p.grad() / static_cast<double>(count);
  return r;
}

}  // namespace

TEST(Documents, PackedSequenceEqualsSeparateDocuments) {
  TempDir dir;
  // N = 32: [9 4 13 2] | [6 11] | a 40-token document: [32] | [8 5 7] (packing rule above)
  test::write_documents_folder(dir.path, make_docs({9, 4, 13, 2, 6, 11, 40, 5, 7}, 64), 64);
  struct Case {
    int64_t sp, ring;
    bool zigzag;
    int64_t chunks;
    const char* techniques;  // "" | "ckpt" (checkpointing, tiled MLP and loss, ZeRO-1) | "sdpa"
  };
  const std::vector<Case> cases = {
      {1, 1, true, 1, ""},      {1, 1, true, 1, "sdpa"}, {1, 1, true, 1, "ckpt"}, {2, 1, true, 1, ""},
      {2, 1, true, 2, "ckpt"},  {4, 1, true, 1, "ckpt"}, {1, 1, true, 2, ""},     {1, 2, true, 1, ""},
      {1, 2, false, 1, "ckpt"}, {2, 2, true, 2, ""},
  };
  const Reference ref = separate_documents(packed_config(dir.path, 1, 1, true, 1));
  ASSERT_GE(ref.documents, 3) << "the batch must pack several documents for the comparison to mean something";
  std::printf("step 0's batch: %lld documents with labels\n", static_cast<long long>(ref.documents));
  for (const Case& k : cases) {
    RunConfig c = packed_config(dir.path, k.sp, k.ring, k.zigzag, k.chunks);
    const std::string t = k.techniques;
    if (t == "ckpt") {
      c.train.activation_checkpointing = "layer";
      c.train.mlp_chunk_tokens = 5;
      c.train.loss_chunk_tokens = 7;
      c.train.zero_stage = 1;
    }
    if (t == "sdpa") c.train.attention = "sdpa";
    const auto issues = validate(c);
    ASSERT_TRUE(issues.empty()) << issues[0].message;
    const auto got = ulysses::testing::train_on_ranks(c, 0);
    const std::string what = "sp " + std::to_string(k.sp) + " ring " + std::to_string(k.ring) +
                             (k.zigzag ? "" : " contiguous") + " head_chunks " + std::to_string(k.chunks) + " " + t;
    const double loss_rel = std::abs(got.loss0 - ref.loss) / std::abs(ref.loss);
    double worst = 0;
    std::string worst_name;
    for (const auto& [n, g] : ref.grads) {
      ASSERT_TRUE(got.grads0.count(n)) << n;
      const double e = (got.grads0.at(n) - g).norm().item<double>() / std::max(1e-30, g.norm().item<double>());
      if (e > worst) {
        worst = e;
        worst_name = n;
      }
    }
    std::printf("%s: loss %.6f vs %.6f (rel %.1e), worst gradient rel %.1e (%s)\n", what.c_str(), got.loss0, ref.loss,
                loss_rel, worst, worst_name.c_str());
    EXPECT_LT(loss_rel, 1e-5) << what;
    EXPECT_LT(worst, 1e-5) << what << ": " << worst_name;
  }
}

// The memory planner's compute figures count the mask's saving as the cost model does, checked
// against a count by hand. Documents 5, 3, 20, 4, 7 at N = 8 pack as [5 3] [8] [8] [4 4]
// [7 + 1 padding]; the causal (query, key) pairs kept, diagonal included, are 15+6, 36, 36,
// 10+10, 28+1 = 142 of 5 x 36 = 180. Per kept pair, head and layer, attention costs 4 dh FLOPs
// forward (QK^T, AV) and 8 dh backward; a causal sequence counts N^2 / 2 pairs (the cost
// model's convention), times the share kept.
TEST(Documents, PlannerCountsTheMaskSaving) {
  TempDir dir;
  test::write_documents_folder(dir.path, make_docs({5, 3, 20, 4, 7}, 50), 50);
  RunConfig c = packed_config(dir.path, /*sp=*/2, /*ring=*/1, false, 1);
  c.train.seq_length = 8;
  c.train.activation_checkpointing = "none";
  // L = 2 layers, H = 4 heads of dh = 8, micro batch 2, one micro-batch, 2 ranks.
  const double pair = 12.0 * 8 * 4 * 2 * 2;  // 12 dh x H x L x micro batch
  const double unmasked = pair * (8.0 * 8 / 2) / 2;
  const double masked = pair * (8.0 * 8 / 2) * (142.0 / 180.0) / 2;
  plan::PlanOptions o;
  o.detail = false;
  o.tflops_per_rank = 1e-9;  // 1 kFLOP/s: the time is the FLOP count in ms
  const plan::MemoryPlan p = plan::plan_memory(c, o);
  EXPECT_NEAR(p.attention_fraction, 142.0 / 180.0, 1e-12);
  EXPECT_NEAR(p.attention_flops_unmasked_per_rank, unmasked, 1e-9 * unmasked);
  EXPECT_NEAR(p.attention_flops_per_rank, masked, 1e-9 * masked);
  // Dense work is not masked: 6 FLOPs per matmul parameter and token, 16 tokens per step over 2 ranks.
  const double matmul_params = double(c.model.num_parameters() - (c.model.tie_word_embeddings ? 0 : 64 * 32));
  EXPECT_NEAR(p.dense_flops_per_rank, 6.0 * matmul_params * 16 / 2, 1e-6);
  EXPECT_NEAR(p.compute_s, (p.dense_flops_per_rank + masked) / 1e3, 1e-9 * p.compute_s);
  // The cost model (the launcher's estimate) says the same.
  const cost::CostEstimate est = cost::estimate(c);
  EXPECT_NEAR(p.flops_per_rank(), est.flops_per_rank, 1e-9 * est.flops_per_rank);
  // --plan prints it; --json carries it.
  const std::string text = plan::plan_to_text(p);
  EXPECT_NE(text.find("the document mask keeps 78.9% of causal (query, key) pairs"), std::string::npos) << text;
  EXPECT_NEAR(plan::plan_to_json(p).at("attention_flops_per_rank").get<double>(), masked, 1e-9 * masked);
  // One document per sequence: nothing saved, nothing said.
  c.data.kind = "synthetic";
  c.data.path.clear();
  const plan::MemoryPlan whole = plan::plan_memory(c, o);
  EXPECT_NEAR(whole.attention_flops_per_rank, unmasked, 1e-9 * unmasked);
  EXPECT_EQ(plan::plan_to_text(whole).find("document mask keeps"), std::string::npos);
}

// Flash-attention's varlen layout of a mask (the cu_seqlens the CUDA kernel takes), by hand:
// row 0 holds documents at 0, 7, 19, 21 of N = 24; row 1 at 0, 2 (the rows end to end: 24, 26).
TEST(Documents, VarlenLayoutFromTheMask) {
  auto start = torch::tensor({0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 19, 19, 21, 21, 21,  //
                              0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  2,  2,  2},
                             torch::kLong)
                   .view({2, 24});
  const DocumentMask m(start);
  EXPECT_EQ(m.varlen().cu_seqlens, (std::vector<int32_t>{0, 7, 19, 21, 24, 26, 48}));
  EXPECT_EQ(m.varlen().max_seqlen, 22);
  // A packed batch as data.kind = documents makes it: documents 5, 3 | 4, 4 | 7 + 1 padding at N = 8.
  TempDir dir;
  test::write_documents_folder(dir.path, make_docs({5, 3, 20, 4, 7}, 50), 50);
  DocumentTokens src(read_documents_manifest(dir.path), 8, 64);
  std::vector<int64_t> ids(24), labels(24), st(24);
  for (int64_t r = 0; r < 3; ++r)
    src.fill(r == 0 ? 0 : r + 2, ids.data() + 8 * r, labels.data() + 8 * r, st.data() + 8 * r);
  const DocumentMask p(torch::tensor(st, torch::kLong).view({3, 8}));
  EXPECT_EQ(p.varlen().cu_seqlens, (std::vector<int32_t>{0, 5, 8, 12, 16, 23, 24}));
  EXPECT_EQ(p.varlen().max_seqlen, 7);
  // A run whose start is not its own first token is not a document layout.
  EXPECT_THROW(DocumentMask(torch::tensor({0, 0, 1, 1}, torch::kLong).view({1, 4})), c10::Error);
}

// The varlen path's layout and reshapes (what CUDA libtorch 2.x runs with flash's varlen kernel)
// with a CPU stand-in for the kernel: causal SDPA over each document's slice of the (T, H, dh)
// tokens. Forward and gradients equal the naive masked reference.
TEST(Documents, VarlenPathMatchesNaiveReference) {
  torch::manual_seed(5);
  const int64_t B = 2, H = 4, Hkv = 2, N = 24, dh = 8;
  auto start = torch::tensor({0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 19, 19, 21, 21, 21,  //
                              0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,  2,  2,  2,  2},
                             torch::kLong)
                   .view({B, N});
  const DocumentMask m(start);
  int calls = 0;
  const VarlenKernel per_document = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& cu, int64_t max_seqlen) {
    ++calls;
    EXPECT_EQ(cu.scalar_type(), torch::kInt32);
    EXPECT_EQ(max_seqlen, 22);
    std::vector<at::Tensor> outs;
    for (int64_t i = 0; i + 1 < cu.size(0); ++i) {
      const int64_t a = cu[i].item<int64_t>(), n = cu[i + 1].item<int64_t>() - a;
      auto slice = [&](const at::Tensor& x) {
        return x.narrow(0, a, n).transpose(0, 1).unsqueeze(0);
      };                                                                                             // (1, H, n, dh)
      outs.push_back(compat::sdpa_causal(slice(q), slice(k), slice(v)).squeeze(0).transpose(0, 1));  // (n, H, dh)
    }
    return at::cat(outs, 0);
  };
  auto q = torch::randn({B, H, N, dh}, torch::kDouble), k = torch::randn({B, Hkv, N, dh}, torch::kDouble);
  auto v = torch::randn({B, Hkv, N, dh}, torch::kDouble), go = torch::randn({B, H, N, dh}, torch::kDouble);
  auto grads = [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& f) {
    auto qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true), vv = v.clone().requires_grad_(true);
    auto o = f(qq, kk, vv);
    o.backward(go);
    return std::vector<at::Tensor>{o.detach(), qq.grad(), kk.grad(), vv.grad()};
  };
  const auto ref = grads([&](auto& a, auto& b, auto& c) { return naive_attention(a, b, c, m); });
  const auto got =
      grads([&](auto& a, auto& b, auto& c) { return varlen_document_attention(a, b, c, m, per_document); });
  EXPECT_EQ(calls, 1);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LT((got[i] - ref[i]).abs().max().item<double>(), 1e-10) << "varlen output/grad " << i;
  // On CPU tensors causal_attention never takes the varlen path (flash is CUDA only).
  EXPECT_FALSE(compat::flash_varlen_supports(q.to(torch::kBFloat16)));
}
