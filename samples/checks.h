// What every sample's verdicts share: where a sample judges what it measured (a result against its
// reference, memory against a plan, a claim its README makes), the judgement goes through Checks, and
// main returns exit_code(). A false check prints a line saying which claim failed, beside the numbers
// it judged, and makes the sample exit 1: the sample tests read only the exit status.
// Not a test framework: a sample still prints every number it measured, and judges only what its
// README claims; speeds on a shared CPU are not judged unless the README names a target.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/device.h"

namespace frugal::samples {

// How far two results a sample calls the same may be apart (one step's gradients, say): not at all on
// the CPU, whose kernels give the same bits run after run; on a GPU cuDNN's fastest backward
// algorithms sum with atomics in any order, so there the same gradients differ by float rounding.
inline double same_within(Device device) { return device.is_cpu() ? 0.0 : 1e-5; }

class Checks {
 public:
  // Records whether `claim` held; a false one is printed at once, so the output shows it where the
  // sample measured it. Returns `held`, for the sample's own wording of the verdict.
  bool expect(bool held, const std::string& claim) {
    if (!held) {
      std::printf("CHECK FAILED: %s\n", claim.c_str());
      failed_.push_back(claim);
    }
    return held;
  }

  // main's exit status: 0 when every check held; otherwise 1, after naming each failed claim again
  // on stderr (the last lines a test log shows).
  int exit_code(const char* sample) const {
    std::fflush(stdout);
    for (const std::string& claim : failed_) std::fprintf(stderr, "%s: check failed: %s\n", sample, claim.c_str());
    return failed_.empty() ? 0 : 1;
  }

 private:
  std::vector<std::string> failed_;
};

}  // namespace frugal::samples
