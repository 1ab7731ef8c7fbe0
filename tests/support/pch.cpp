// Builds the precompiled header the test executables share (tests/CMakeLists.txt, lwcl_precompile);
// it holds no code of its own.
