#include "oobleck/executor/model_config.h"
