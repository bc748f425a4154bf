#include "core/http_date.hpp"

#include <ctime>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

constexpr std::string_view kShortDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr std::string_view kLongDays[] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// A tiny cursor over the input; every method consumes only on success.
struct Cursor {
  std::string_view s;

  bool literal(std::string_view lit) {
    if (s.substr(0, lit.size()) != lit) return false;
    s.remove_prefix(lit.size());
    return true;
  }
  // Exactly n decimal digits.
  bool digits(size_t n, int& out) {
    if (s.size() < n) return false;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    out = v;
    s.remove_prefix(n);
    return true;
  }
  template <size_t N>
  bool one_of(const std::string_view (&names)[N], int* index = nullptr) {
    for (size_t i = 0; i < N; ++i) {
      if (literal(names[i])) {
        if (index) *index = static_cast<int>(i);
        return true;
      }
    }
    return false;
  }
  // "HH:MM:SS"
  bool time_of_day(int& h, int& m, int& sec) {
    return digits(2, h) && literal(":") && digits(2, m) && literal(":") && digits(2, sec);
  }
};

bool is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

std::optional<int64_t> to_unix(int year, int month0, int day, int h, int m, int s) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int dim = kDays[month0] + (month0 == 1 && is_leap(year) ? 1 : 0);
  if (day < 1 || day > dim || h > 23 || m > 59 || s > 60) return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month0;
  tm.tm_mday = day;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = s;  // 60 normalises to the next minute
  return static_cast<int64_t>(timegm(&tm));
}

std::optional<int64_t> parse_imf_fixdate(std::string_view text) {
  Cursor c{text};
  int day, month, year, h, m, s;
  if (c.one_of(kShortDays) && c.literal(", ") && c.digits(2, day) && c.literal(" ") && c.one_of(kMonths, &month) &&
      c.literal(" ") && c.digits(4, year) && c.literal(" ") && c.time_of_day(h, m, s) && c.literal(" GMT") &&
      c.s.empty())
    return to_unix(year, month, day, h, m, s);
  return std::nullopt;
}

std::optional<int64_t> parse_rfc850(std::string_view text) {
  Cursor c{text};
  int day, month, yy, h, m, s;
  if (c.one_of(kLongDays) && c.literal(", ") && c.digits(2, day) && c.literal("-") && c.one_of(kMonths, &month) &&
      c.literal("-") && c.digits(2, yy) && c.literal(" ") && c.time_of_day(h, m, s) && c.literal(" GMT") && c.s.empty())
    return to_unix(yy >= 70 ? 1900 + yy : 2000 + yy, month, day, h, m, s);
  return std::nullopt;
}

std::optional<int64_t> parse_asctime(std::string_view text) {
  Cursor c{text};
  int day, month, year, h, m, s;
  if (!(c.one_of(kShortDays) && c.literal(" ") && c.one_of(kMonths, &month) && c.literal(" "))) return std::nullopt;
  // The day is two digits or a space and one digit.
  if (!(c.digits(2, day) || (c.literal(" ") && c.digits(1, day)))) return std::nullopt;
  if (c.literal(" ") && c.time_of_day(h, m, s) && c.literal(" ") && c.digits(4, year) && c.s.empty())
    return to_unix(year, month, day, h, m, s);
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> parse_http_date(std::string_view text) {
  if (auto t = parse_imf_fixdate(text)) return t;
  if (auto t = parse_rfc850(text)) return t;
  return parse_asctime(text);
}

}  // namespace pg_outbox::core
