#include "oobleck/executor/gpt.h"
