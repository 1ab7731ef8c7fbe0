// train_teacher built with nvcc: the same program, training on the GPU when one is present.
#include "train_teacher.cpp"
