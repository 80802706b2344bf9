// Measures the error of every budget choice on the suite's data, the table the calibrated
// predictions (core/policy/error_calibration.h) come from, and checks them:
//
//   cerar-bench-error [--buffers B] [--ranks 2,4,8,16,32] [--lengths 1024]
//                     [--gradients tests/data/gradients.npy] [--kinds gaussian,...]
//                     [--choices ring,fp16,...]  (names as printed; a prefix selects, e.g. cerar)
//
// For each choice (the float32 ring, CERAR at r = c/N of 2 and 8 and eps 2^-11 and 2^-10,
// the fp16, bf16 and int8 wires), N, data kind and length: the 99.9th percentile and the largest of
// the measured max relative error over B buffers, the strict bound, the calibrated prediction
// and how many buffers exceeded it. Lines are tab-separated, one per row.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core/policy/error_calibration.h"
#include "tools/error_sample.h"

using namespace cerar;
using namespace cerar::errors;

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

struct Options {
  int buffers = 1000;
  std::vector<int> ranks = {2, 4, 8, 16, 32};
  std::vector<size_t> lengths = {1024};
  std::vector<std::string> kinds = {"gaussian", "mean+noise", "heavy-tailed", "sparse",
                                    "gradients"};
  std::string gradients = "tests/data/gradients.npy";
  std::vector<std::string> choices;  // empty: every choice
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--buffers") o.buffers = std::atoi(value.c_str());
    else if (flag == "--gradients") o.gradients = value;
    else if (flag == "--kinds") o.kinds = split(value);
    else if (flag == "--choices") o.choices = split(value);
    else if (flag == "--ranks") {
      o.ranks.clear();
      for (auto& v : split(value)) o.ranks.push_back(std::atoi(v.c_str()));
    } else if (flag == "--lengths") {
      o.lengths.clear();
      for (auto& v : split(value)) o.lengths.push_back(std::strtoull(v.c_str(), nullptr, 10));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct Named {
  std::string name;
  Choice choice;
};

std::vector<Named> choicesFor(int N) {
  std::vector<Named> out = {{"ring", {N, 0, Wire::kNone}},
                            {"fp16", {N, 0, Wire::kFloat16}},
                            {"bf16", {N, 0, Wire::kBFloat16}},
                            {"int8", {N, 0, Wire::kInt8}}};
  if (N > 2) {
    for (int r : {2, 8})
      for (int e : {11, 10})
        out.push_back({"cerar r=" + std::to_string(r) + " eps=2^-" + std::to_string(e),
                       {r * N, std::ldexp(1.0, -e), Wire::kNone}});
  }
  return out;
}

bool selected(const Options& o, const std::string& name) {
  if (o.choices.empty()) return true;
  return std::any_of(o.choices.begin(), o.choices.end(),
                     [&](const std::string& prefix) { return name.rfind(prefix, 0) == 0; });
}

ErrorChoice errorChoice(const Choice& c, int N) {
  if (c.wire != Wire::kNone) return ErrorChoice::wireRing(c.wire);
  if (c.c == N) return ErrorChoice::ring(DType::kFloat32);
  return ErrorChoice::cerar(c.c, c.eps, DType::kFloat32);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  GradientSet real;
  if (std::find(o.kinds.begin(), o.kinds.end(), "gradients") != o.kinds.end())
    real = loadGradients(o.gradients);
  std::printf("choice\tN\tkind\tlength\tbuffers\tq99.9\tmax\tstrict\tcalibrated\tover\n");
  for (int N : o.ranks) {
    for (const auto& named : choicesFor(N)) {
      if (!selected(o, named.name)) continue;
      for (size_t n : o.lengths) {
        const ErrorChoice e = errorChoice(named.choice, N);
        const double strict = predictedError(e, N, n, ErrorBound::kStrict);
        const double calibrated = predictedError(e, N, n, ErrorBound::kCalibrated);
        for (const auto& kindName : o.kinds) {
          const DataKind kind = parseDataKind(kindName);
          if (kind == DataKind::kGradients && n > real.length) continue;
          std::vector<double> errors(o.buffers);
          for (int b = 0; b < o.buffers; ++b)
            errors[b] = measureOnce(kind, N, n, named.choice, 1000003ull * b + N, &real);
          std::sort(errors.begin(), errors.end());
          const size_t q = std::min(errors.size() - 1, size_t(std::ceil(0.999 * errors.size())) - 1);
          const long over = std::count_if(errors.begin(), errors.end(),
                                          [&](double x) { return x > calibrated; });
          std::printf("%s\t%d\t%s\t%zu\t%d\t%.3g\t%.3g\t%.3g\t%.3g\t%ld\n", named.name.c_str(), N,
                      kindName.c_str(), n, o.buffers, errors[q], errors.back(), strict,
                      calibrated, over);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
