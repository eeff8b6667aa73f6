// libtorch pulls in glog, whose CHECK macros would shadow doctest's: include
// torch first, drop glog's names, then doctest.
#pragma once

#include <torch/torch.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE

#include <doctest/doctest.h>
