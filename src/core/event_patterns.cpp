#include "core/event_patterns.hpp"

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

std::vector<std::string> patterns_matching(const std::string& event_type) {
  std::vector<std::string> patterns{event_type};
  for (size_t dot = event_type.find('.'); dot != std::string::npos; dot = event_type.find('.', dot + 1))
    if (dot > 0) patterns.push_back(event_type.substr(0, dot) + ".*");
  return patterns;
}

}  // namespace pg_outbox::core
