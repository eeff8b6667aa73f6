#include "oobleck/sim/replay.h"
