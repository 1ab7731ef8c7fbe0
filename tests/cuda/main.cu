// main of test_cuda. On a machine without a usable CUDA device it runs nothing, says how many test
// cases it skipped, and exits with 77, which ctest reports as "skipped" (SKIP_RETURN_CODE), never as
// passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "lwcl/backend/cuda/device.cuh"

namespace {

// Receives doctest's answer to --count: the number of test cases that pass the command line's filters.
struct count_reporter : doctest::IReporter {
  static inline unsigned count = 0;
  explicit count_reporter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData& q) override {
    if (q.run_stats) count = q.run_stats->numTestCasesPassingFilters;
  }
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_REPORTER("lwcl_count", 0, count_reporter);

int main(int argc, char** argv) {
  constexpr int skip_code = 77;
  int devices = 0;
  try {
    devices = lwcl::backend::cuda_device_count();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_cuda: %s\n", e.what());
    return 1;
  }
  if (devices == 0) {
    // Ask doctest to count the test cases the command line selects, answering to count_reporter only.
    std::vector<const char*> args(argv, argv + argc);
    args.push_back("--count");
    args.push_back("--reporters=lwcl_count");
    doctest::Context counter(static_cast<int>(args.size()), args.data());
    counter.run();
    std::printf("test_cuda: no CUDA device found; %u CUDA test cases skipped\n", count_reporter::count);
    return skip_code;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
