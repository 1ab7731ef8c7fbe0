// atomic_file (core/fs.hpp), the one way the project writes a file: the target holds the old bytes or
// the whole new ones; a write that fails (here a file-size limit, what a full disk does to a writer) or
// is abandoned names the file and the reason, leaves the old file and removes the temporary.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("lwcl_test_fs_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::size_t files_in(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

// Lowers this process's file-size limit for its lifetime, with SIGXFSZ ignored so that a write past it
// fails with EFBIG instead of ending the process: a disk that fills up at `bytes`.
struct file_size_limit {
  rlimit old{};
  void (*old_handler)(int) = nullptr;
  explicit file_size_limit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = old;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lower) == 0);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

}  // namespace

TEST_CASE("atomic_file replaces the target only at commit, and leaves no temporary") {
  const auto dir = scratch("commit");
  const fs::path target = dir / "state.json";
  write_text_atomic(target, "old\n");
  {
    atomic_file f(target);
    f.stream() << "new " << 42 << '\n';
    // Before the commit the target is the old file; the bytes are in the temporary beside it.
    CHECK(read_text(target) == "old\n");
    CHECK(f.temporary() == fs::path(target.string() + ".tmp"));
    CHECK(fs::exists(f.temporary()));
    f.commit();
  }
  CHECK(read_text(target) == "new 42\n");
  CHECK(files_in(dir) == 1);

  // More than the 64 KiB buffer, in pieces of every size, through write() and the stream.
  std::string big;
  for (int i = 0; i < 300000; ++i) big.push_back(static_cast<char>('a' + i % 26));
  {
    atomic_file f(target);
    f.write(big.data(), 10);
    f.stream().write(big.data() + 10, 70000);
    for (std::size_t at = 70010; at < big.size(); ++at) f.stream().put(big[at]);
    f.commit();
  }
  CHECK(read_text(target) == big);
  write_stream_atomic(target, [](std::ostream& os) { os << "streamed"; });
  CHECK(read_text(target) == "streamed");
  CHECK(files_in(dir) == 1);

  // A second commit is an error, not a second rename.
  atomic_file twice(dir / "twice");
  twice.commit();
  CHECK_THROWS_WITH_AS(twice.commit(), doctest::Contains("already committed"), lwcl::error);
}

TEST_CASE("an atomic_file dropped without commit leaves the old file and no temporary") {
  const auto dir = scratch("abandon");
  const fs::path target = dir / "student.bin";
  write_text_atomic(target, "good checkpoint");
  try {
    write_stream_atomic(target, [](std::ostream& os) {
      os << "half a checkpoint";
      throw error("the writer failed half-way");
    });
  } catch (const error&) {
  }
  CHECK(read_text(target) == "good checkpoint");
  CHECK(files_in(dir) == 1);
}

TEST_CASE("a write past the file-size limit is an error naming the file and the reason; the old file stays") {
  const auto dir = scratch("limit");
  const fs::path target = dir / "optimizer.bin";
  write_text_atomic(target, "the last good state");
  const std::string big(1 << 20, 'x');
  {
    const file_size_limit limit(64 * 1024);
    const std::string named = "cannot write '" + target.string() + "'";
    CHECK_THROWS_WITH_AS(write_file_atomic(target, big), doctest::Contains(named.c_str()), lwcl::error);
    CHECK_THROWS_WITH_AS(write_file_atomic(target, big), doctest::Contains("the file-size limit was reached"),
                         lwcl::error);
    CHECK_THROWS_WITH_AS(write_file_atomic(target, big), doctest::Contains("'optimizer.bin' is as it was"), lwcl::error);
    // Through the stream as well: the failure surfaces at commit.
    CHECK_THROWS_WITH_AS(write_stream_atomic(target, [&](std::ostream& os) { os << big; }),
                         doctest::Contains("the file-size limit was reached"), lwcl::error);
    // A writer that checks its own stream first (adamw::save does): the error still names the file and
    // the reason.
    CHECK_THROWS_WITH_AS(write_stream_atomic(target,
                                             [&](std::ostream& os) {
                                               os << big;
                                               check(os.good(), "the writer's own check");
                                             }),
                         doctest::Contains("the file-size limit was reached"), lwcl::error);
    // Under the limit, writes still succeed.
    write_file_atomic(dir / "small", "fits");
  }
  CHECK(read_text(target) == "the last good state");
  CHECK(read_text(dir / "small") == "fits");
  CHECK(files_in(dir) == 2);
}

TEST_CASE("atomic_file names what it could not create") {
  const auto dir = scratch("missing");
  const fs::path target = dir / "no_such_dir" / "config.json";
  const std::string named = "cannot write '" + target.string() + "': creating";
  CHECK_THROWS_WITH_AS(write_text_atomic(target, "{}"), doctest::Contains(named.c_str()), lwcl::error);
  // Unique temporaries, for writers that may race on one target, are named by process and counter.
  atomic_file a(dir / "rec", {.sync = durability::process, .unique_temporary = true});
  atomic_file b(dir / "rec", {.sync = durability::process, .unique_temporary = true});
  CHECK(a.temporary() != b.temporary());
  CHECK(a.temporary().string().starts_with((dir / "rec.tmp.").string()));
  a.write("a", 1);
  b.write("b", 1);
  a.commit();
  b.commit();
  CHECK(read_text(dir / "rec") == "b");
  CHECK(files_in(dir) == 1);
}
