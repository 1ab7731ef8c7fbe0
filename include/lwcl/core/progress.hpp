#pragma once
// A progress bar for long loops. On a terminal it redraws one line in place; elsewhere (CI logs, pipes)
// it prints a plain line every few seconds and at the end, so logs stay readable.

#include <unistd.h>

#include <cstdio>
#include <string>

#include "lwcl/core/timer.hpp"

namespace lwcl {

class progress {
 public:
  // `stream` is where the bar goes (stderr by default); whether it is a terminal picks the style.
  progress(std::string label, long total, double line_every_seconds = 5.0, std::FILE* stream = stderr)
      : label_(std::move(label)),
        total_(total),
        every_(line_every_seconds),
        out_(stream),
        tty_(isatty(fileno(stream)) != 0) {}
  ~progress() { finish(); }
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;

  // A loop that resumes: `done` units were complete before this bar started (a run restarted from its
  // checkpoint), so the time left is estimated from the units done since, not from all of them.
  void starts_at(long done) { base_ = done; }

  // Reports that `done` of `total` units are complete; `note` (e.g. "loss 3.21") is shown beside the bar.
  void update(long done, const std::string& note = {}) {
    done_ = done;
    note_ = note;
    const double now = clock_.seconds();
    if (tty_) {
      if (now - last_ >= 0.1 || done_ >= total_) draw(now, '\r');
    } else if (now - last_ >= every_ || done_ >= total_) {
      draw(now, '\n');
    }
  }
  void finish() {
    if (finished_) return;
    finished_ = true;
    if (done_ < total_ && done_ > 0 && !tty_ && drawn_ != done_) draw(clock_.seconds(), '\n');
    if (tty_ && done_ > 0) std::fputc('\n', out_);
  }

 private:
  void draw(double now, char end) {
    last_ = now;
    drawn_ = done_;
    const double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const long since = done_ - base_;  // units done while this bar ran
    const double eta = since > 0 ? now * static_cast<double>(total_ - done_) / static_cast<double>(since) : 0.0;
    if (tty_) {
      constexpr int width = 30;
      const int filled = static_cast<int>(frac * width);
      std::string bar(static_cast<std::size_t>(filled), '#');
      bar.resize(width, '.');
      std::fprintf(out_, "%s%s [%s] %ld/%ld %5.1fs eta %5.1fs %s\x1b[K", end == '\r' ? "\r" : "", label_.c_str(),
                   bar.c_str(), done_, total_, now, eta, note_.c_str());
    } else {
      std::fprintf(out_, "%s: %ld/%ld (%.0f%%) %.1fs eta %.1fs %s\n", label_.c_str(), done_, total_, 100.0 * frac, now,
                   eta, note_.c_str());
    }
    std::fflush(out_);
  }

  std::string label_;
  long total_;
  double every_;
  std::FILE* out_;
  bool tty_;
  timer clock_;
  double last_ = -1e30;
  long done_ = 0;
  long base_ = 0;    // units complete before this bar started (starts_at)
  long drawn_ = -1;  // the `done` value the last line showed
  std::string note_;
  bool finished_ = false;
};

}  // namespace lwcl
