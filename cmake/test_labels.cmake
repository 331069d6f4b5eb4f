# Test labels, declared beside the tests.
#
# Every GoogleTest source names its label once, on a line of its own:
#
#     // ctest-file-label: quick
#
# and a test that belongs elsewhere says so on the line right above its TEST, TEST_F or TEST_P:
#
#     // ctest-label: slow
#     TEST(GrpoEndToEnd, LearnsTheTask) {
#
# Labels: quick (the edit-test loop), slow (whole runs, real shapes), oracle (PyTorch, NumPy,
# Python, Node.js), slow-oracle (both), browser (headless Chromium). A source without a
# ctest-file-label line, or with an unknown label, stops the configure step; a test this parser
# does not see (a macro it does not know) is still discovered, under `slow`, never `quick`.

set(FP8RL_TEST_LABELS quick slow oracle slow-oracle browser)

# Sets <label>_filter in the caller's scope for each label: the gtest filter of its tests.
function(fp8rl_collect_test_labels)
  list(JOIN FP8RL_TEST_LABELS ", " known)
  foreach(label IN LISTS FP8RL_TEST_LABELS)
    set(tests_${label} "")
  endforeach()
  foreach(source IN LISTS ARGN)
    # Configure again when a source changes, so that a test added to it is filed under its label.
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${source})
    file(READ ${CMAKE_SOURCE_DIR}/${source} content)
    string(REGEX MATCH "// ctest-file-label: ([a-z-]+)" file_label "${content}")
    if(NOT file_label)
      message(FATAL_ERROR "${source} declares no label: add a line '// ctest-file-label: quick' (or one of "
                          "${known}); see cmake/test_labels.cmake")
    endif()
    set(file_label ${CMAKE_MATCH_1})
    string(REGEX MATCHALL "(// ctest-label: [a-z-]+[ \t]*\n[ \t]*)?TEST(_F|_P)?\\([ \t\r\n]*[A-Za-z0-9_]+,[ \t\r\n]*[A-Za-z0-9_]+"
           tests "${content}")
    foreach(test IN LISTS tests)
      set(label ${file_label})
      if(test MATCHES "^// ctest-label: ([a-z-]+)")
        set(label ${CMAKE_MATCH_1})
      endif()
      if(NOT label IN_LIST FP8RL_TEST_LABELS)
        message(FATAL_ERROR "${source}: unknown test label '${label}' (known: ${known})")
      endif()
      string(REGEX MATCH "TEST(_F|_P)?\\([ \t\r\n]*([A-Za-z0-9_]+),[ \t\r\n]*([A-Za-z0-9_]+)" unused "${test}")
      set(name "${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
      if(CMAKE_MATCH_1 STREQUAL "_P")
        set(name "*/${name}/*")  # Instantiation/Suite.Name/Parameter
      endif()
      list(APPEND tests_${label} "${name}")
    endforeach()
  endforeach()
  set(all "")
  foreach(label IN LISTS FP8RL_TEST_LABELS)
    list(JOIN tests_${label} ":" joined)
    set(${label}_filter "${joined}" PARENT_SCOPE)
    list(APPEND all ${tests_${label}})
  endforeach()
  list(JOIN all ":" joined)
  set(unlabelled_filter "-${joined}" PARENT_SCOPE)
endfunction()
