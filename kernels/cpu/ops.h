// Every CPU reference kernel, one header per op family.
#pragma once

#include "cpu/activation.h"
#include "cpu/add.h"
#include "cpu/attention.h"
#include "cpu/cross_entropy.h"
#include "cpu/dropout.h"
#include "cpu/embedding.h"
#include "cpu/layernorm.h"
#include "cpu/linear.h"
#include "cpu/optimizer.h"
#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
