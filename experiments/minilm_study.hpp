#pragma once
// The run of experiments/minilm_compress (also paper_repro/efficiency_bert's, once per setting): a real
// pretrained BERT sentence encoder, all-MiniLM-L6-v2 (tools/install_deps.sh --minilm), pruned and
// recovered. Wanda-sp removes --ratio of every layer's heads and FFN channels
// (after block influence removes --depth of the layers: --depth 0.5 --ratio 0 makes 6 -> 3), on
// calibration windows of the training split tokenised by the model's own WordPiece; the student is then
// recovered under one budget by layer-wise curriculum learning (the default bundle), layer-wise training
// without curriculum, end-to-end distillation on the mean-pooled embedding and end-to-end on the last
// hidden state, and not at all. Each is judged on a pool of --pool held-out sentences drawn over every
// validation document of both corpora: the cosine between its sentence embedding and the teacher's, and
// top-10 neighbour agreement with the teacher; --test-split adds the test split's pool. With
// --curve-points, every method's embedding distance (1 - mean cosine) on a smaller pool at points of
// its budget, and the cost at which each layer-wise method first reaches the embedding-objective
// end-to-end student's final distance. Every student is saved as a BertModel folder, as the teacher
// came, and reloaded bitwise. With --seeds N, each seed its own calibration sample and data order,
// and mean +- sd over them. Writes <out>/{config.json, report.json, table.md} and a folder per
// method (per seed).

namespace lwcl::experiments {

// minilm_compress's whole run, from its command line (argv[0] the program); returns its exit code.
// Compiled once, in experiments/minilm_study.cpp (the lwcl_minilm_study library).
int minilm_main(int argc, char** argv);

}  // namespace lwcl::experiments
