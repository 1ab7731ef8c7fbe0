// Builds the precompiled header the experiment programs share (experiments/CMakeLists.txt,
// lwcl_precompile); it holds no code of its own.
