// The limits of oobleck.profile.v1 and what reading one shares with the
// import of Oobleck's profile folders (oobleck_import.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

inline constexpr std::string_view kProfileFormat = "oobleck.profile.v1";
// Limits that keep every sum the planner forms far from overflow.
inline constexpr std::int64_t kMaxBytes = std::int64_t{1} << 46;  // 64 TiB per field
inline constexpr double kMaxMs = 1e9;                             // 11 days per layer
inline constexpr double kMaxBytesPerSecond = 1e15;
inline constexpr std::size_t kMaxLayers = 10000;

// Sorts a table by ranks then bytes and makes each rank count's times
// non-decreasing in size: measurement noise must not make a larger layer
// cheaper (allreduces.cpp).
void sort_never_falling(std::vector<AllreducePoint>& table);

// InputError unless some layer has a time: a profile of zeros plans nothing.
void check_costs(const Profile& profile);

}  // namespace oobleck::detail
