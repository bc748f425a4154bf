#include "core/partition_layout.hpp"

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

int partition_width_s(int retention_s) {
  static const int kWidths[] = {86400, 21600, 3600, 900, 300, 60, 10};
  for (int width : kWidths)
    if (width <= retention_s / 4) return width;
  return 10;
}

}  // namespace pg_outbox::core
