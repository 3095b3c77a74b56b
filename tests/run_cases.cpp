// How every doctest suite of frugal runs its cases honestly (the CPU, GPU and MPI suites' mains call
// run_cases): a case that cannot run here calls FRUGAL_SKIP (tests/skip.h) and is counted; a run in
// which every case that ran skipped itself exits kSkipCode, which CTest reports as "Skipped", never
// "Passed"; a filter that selects no case is a failure: CTest runs each case by name, and a name
// CTest cannot pass whole (one with a ';', which CMake splits into two tests) would otherwise "pass"
// by running nothing.
// Not here: what a suite checks before its cases run (the GPU suite's device, the MPI suite's ranks).
#include <doctest/doctest.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <string>

#include "tests/skip.h"

namespace {

std::set<std::string> g_skipped;   // names of the cases that skipped themselves
int g_cases_run = 0;

// Counts the cases that start; doctest reports the rest as usual.
struct CaseCounter : doctest::IReporter {
  explicit CaseCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_cases_run; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("case_counter", 1, CaseCounter);

}  // namespace

namespace frugal::test {

void mark_skipped(const char* reason) {
  const std::string name = doctest::getContextOptions()->currentTest ? doctest::getContextOptions()->currentTest->m_name : "";
  g_skipped.insert(name);
  std::cerr << "SKIPPED: " << name << ": " << reason << "\n";
}

int skipped_cases() { return static_cast<int>(g_skipped.size()); }

}  // namespace frugal::test

namespace {

bool selects_cases_by_name(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("-tc=") || arg.starts_with("--test-case=")) return true;
  }
  return false;
}

}  // namespace

namespace frugal::test {

int run_cases(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;  // --help, --list-test-cases, ...
  if (g_cases_run == 0 && selects_cases_by_name(argc, argv)) {
    std::cerr << "[frugal] no test case has the name asked for (a ';' in a case's name splits it in CTest)\n";
    return EXIT_FAILURE;
  }
  const int skipped = skipped_cases();
  if (skipped > 0) std::cerr << "[frugal] " << skipped << " of " << g_cases_run << " case(s) skipped themselves\n";
  if (result == EXIT_SUCCESS && g_cases_run > 0 && skipped == g_cases_run) return kSkipCode;
  return result;
}

}  // namespace frugal::test
