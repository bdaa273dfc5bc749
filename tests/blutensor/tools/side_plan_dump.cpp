// side_plan_dump.cpp: a captured step's side-stream plan (Note [Side stream], blutensor) read on a
// machine without a GPU: the record (captured_step.json, as `blutrain train --engine captured`
// writes it and device-engine-memory.sh brings back gzipped) and, optionally, blu-plan's plan
// (its kernels' node sets, as bound overrides), printed one call a line: index, op, the override
// it belongs to, its side group (-1: main stream) and the groups joined before it.
//   side_plan_dump <captured_step.json> [plan.json|-] [first] [last] [--chains | --no-chains] [--cheap-first] [--in-flight N] [--fold] [--ln-residual]
// --ln-residual: the LayerNorm + residual-add pairs as overrides (BLU_CAPTURE_LN_RESIDUAL=1).
// --fold: also the compiled step's classifier-gradient rewrites (Note [Classifier gradient
// scaling], split as Note [Early classifier scaling] does) as overrides.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "blutensor/capture.h"
#include "blutensor/json.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "side_plan_dump: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  int chains = -1;  // -1: the executable's default for the record (side_chains_default(g))
  bool fold = false, cheap_first = false, ln_residual = false;
  int in_flight = blu::capture::kSideInFlightDefault;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--chains") {
      chains = 1;
    } else if (a == "--no-chains") {
      chains = 0;
    } else if (a == "--cheap-first") {
      cheap_first = true;
    } else if (a == "--ln-residual") {
      ln_residual = true;
    } else if (a == "--fold") {
      fold = true;
    } else if (a == "--in-flight" && i + 1 < argc) {
      in_flight = std::atoi(argv[++i]);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty()) {
    std::fprintf(stderr, "usage: side_plan_dump <captured_step.json> [plan.json|-] [first] [last] [--chains | --no-chains] [--cheap-first] [--in-flight N] [--fold] [--ln-residual]\n");
    return 2;
  }
  const blu::capture::Graph g = blu::capture::Graph::from_json(read_file(pos[0]));
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> override_of(static_cast<size_t>(n), -1);
  if (pos.size() > 1 && pos[1] != "-") {
    const blu::json::Value plan = blu::json::parse(read_file(pos[1]));
    int k = 0;
    const blu::json::Value* kernels = plan.find("kernels");
    if (kernels == nullptr) {
      std::fprintf(stderr, "side_plan_dump: %s has no \"kernels\"\n", pos[1].c_str());
      return 2;
    }
    for (const blu::json::Value& kernel : kernels->as_array()) {
      const blu::json::Value* nodes = kernel.find("nodes");
      if (nodes == nullptr) continue;
      for (const blu::json::Value& node : nodes->as_array()) {
        const int64_t i = node.as_integer();
        if (i >= 0 && i < n) override_of[static_cast<size_t>(i)] = k;
      }
      ++k;
    }
  }
  if (ln_residual) {  // Note [LayerNorm backward with the residual gradient]: each pair one launch
    int next = 1 + *std::max_element(override_of.begin(), override_of.end());
    for (const blu::capture::LnResidualPair& q : blu::capture::find_ln_residual_pairs(g, override_of)) {
      override_of[static_cast<size_t>(q.ln)] = override_of[static_cast<size_t>(q.add)] = next++;
    }
  }
  if (fold) {
    int next = 1 + *std::max_element(override_of.begin(), override_of.end());
    const blu::capture::ClassifierGradChains c = blu::capture::find_classifier_grad_chains(g, override_of);
    const auto take = [&](const std::vector<int>& nodes) {
      for (int i : nodes) override_of[static_cast<size_t>(i)] = next;
      ++next;
    };
    for (const std::vector<int>& dx : c.dx) take(dx);
    if (!c.embedding.empty()) {  // split as Note [Early classifier scaling] splits it
      const auto emb = c.embedding.begin() + static_cast<std::ptrdiff_t>(c.embedding_split);
      take(std::vector<int>(c.embedding.begin(), emb));
      take(std::vector<int>(emb, c.embedding.end()));
    }
    std::cout << "fold: " << c.dx.size() << " dX chain(s), embedding chain of " << c.embedding.size() << " calls"
              << (c.why_embedding.empty() ? "" : " (" + c.why_embedding + ")") << "\n";
  }
  const int first = pos.size() > 2 ? std::atoi(pos[2].c_str()) : 0;
  const int last = pos.size() > 3 ? std::atoi(pos[3].c_str()) : n;
  const blu::capture::SidePlan p = blu::capture::side_stream_plan(g, override_of, in_flight, chains, cheap_first);
  std::cout << "calls " << n << ", side calls " << p.side_calls << ", groups " << p.fork_at.size() << "\n";
  for (int i = std::max(0, first); i < std::min(n, last); ++i) {
    std::cout << i << " " << g.nodes[static_cast<size_t>(i)].op;
    if (override_of[static_cast<size_t>(i)] >= 0) std::cout << " [override " << override_of[static_cast<size_t>(i)] << "]";
    std::cout << " group " << p.group_of[static_cast<size_t>(i)];
    for (size_t q = 0; q < p.fork_at.size(); ++q) {
      if (p.join_before[q] == i) std::cout << " <join " << q << ">";
    }
    std::cout << "\n";
  }
  for (size_t k = 0; k < p.issue_order.size(); ++k) {
    if (p.issue_order[k].empty() || p.issue_order[k].front() < first || p.issue_order[k].front() >= last) continue;
    std::cout << "group " << k << " issued as";
    for (int j : p.issue_order[k]) std::cout << " " << j;
    std::cout << "\n";
  }
  return 0;
}
