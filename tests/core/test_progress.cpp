// progress: off a terminal it prints plain lines (every update when the interval is 0, otherwise the
// first, the last, and a closing line for an unfinished loop); on a terminal it redraws one line.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "lwcl/core/progress.hpp"

using namespace lwcl;

namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  return s;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) out.push_back(s.substr(start, nl - start));
  CHECK(start == s.size());  // every line is complete
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("progress prints one plain line per update when not on a terminal") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress p("train", 4, 0.0, f);
    for (long i = 1; i <= 4; ++i) p.update(i, "loss 1.5");
  }
  const auto lines = lines_of(contents(f));
  std::fclose(f);
  REQUIRE(lines.size() == 4);
  CHECK(starts_with(lines[0], "train: 1/4 (25%) "));
  CHECK(starts_with(lines[1], "train: 2/4 (50%) "));
  CHECK(starts_with(lines[3], "train: 4/4 (100%) "));
  for (const auto& l : lines) {
    CHECK(l.find("loss 1.5") != std::string::npos);
    CHECK(l.find('\r') == std::string::npos);
    CHECK(l.find('\x1b') == std::string::npos);
  }
}

TEST_CASE("progress with a long interval prints the first and the last line only") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress p("eval", 10, 1e9, f);
    for (long i = 1; i <= 10; ++i) p.update(i);
  }
  const auto lines = lines_of(contents(f));
  std::fclose(f);
  REQUIRE(lines.size() == 2);
  CHECK(starts_with(lines[0], "eval: 1/10 (10%) "));
  CHECK(starts_with(lines[1], "eval: 10/10 (100%) "));
}

TEST_CASE("progress closes an unfinished loop with a line showing where it stopped") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress p("cache", 10, 1e9, f);
    p.update(1);
    p.update(4);
  }
  {
    progress untouched("idle", 10, 0.0, f);  // never updated: prints nothing
  }
  const auto lines = lines_of(contents(f));
  std::fclose(f);
  REQUIRE(lines.size() == 2);
  CHECK(starts_with(lines[0], "cache: 1/10 (10%) "));
  CHECK(starts_with(lines[1], "cache: 4/10 (40%) "));
}

TEST_CASE("progress after a resume estimates the time left from the units done since it started") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress p("train", 2000, 0.0, f);
    p.starts_at(1000);  // half done before this process
    const timespec pause{0, 50'000'000};
    nanosleep(&pause, nullptr);
    p.update(1001);  // one unit in about 0.05 s: 999 left take about 50 s
  }
  const auto lines = lines_of(contents(f));
  std::fclose(f);
  REQUIRE(lines.size() == 1);
  CHECK(starts_with(lines[0], "train: 1001/2000 (50%) "));
  const auto at = lines[0].find(" eta ");
  REQUIRE(at != std::string::npos);
  const double eta = std::strtod(lines[0].c_str() + at + 5, nullptr);
  // From all 1001 units the estimate would be about 0.05 s; from the one done since, 999 x 0.05 s or more.
  CHECK(eta >= 40.0);
}

TEST_CASE("progress redraws a single line in place on a terminal") {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
    MESSAGE("no pseudo-terminal available; terminal style not checked");
    if (master >= 0) close(master);
    return;
  }
  const int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  REQUIRE(slave >= 0);
  std::FILE* tty = fdopen(slave, "w");
  REQUIRE(tty != nullptr);
  {
    progress p("train", 2, 5.0, tty);
    p.update(1);
    p.update(2);
  }
  std::fflush(tty);
  std::string out;
  char buf[512];
  for (pollfd pfd{master, POLLIN, 0}; poll(&pfd, 1, 1000) > 0 && (pfd.revents & POLLIN);) {
    const ssize_t got = read(master, buf, sizeof buf);
    if (got <= 0) break;
    out.append(buf, static_cast<std::size_t>(got));
    if (out.find("2/2") != std::string::npos && out.back() == '\n') break;
  }
  std::fclose(tty);
  close(master);
  CHECK(out.find("\rtrain [###############...............] 1/2") != std::string::npos);
  CHECK(out.find("\rtrain [##############################] 2/2") != std::string::npos);
  CHECK(out.find("\x1b[K") != std::string::npos);
  CHECK(out.find("train: ") == std::string::npos);  // not the plain style
}

TEST_CASE("progress does not repeat a line already printed when an unfinished loop closes") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    progress p("work", 10, 0.0, f);
    p.update(4);
  }
  const auto lines = lines_of(contents(f));
  std::fclose(f);
  REQUIRE(lines.size() == 1);
  CHECK(starts_with(lines[0], "work: 4/10"));
}
