# Compiles the text assets of `fp8rl report` into fp8rl_report (included by CMakeLists.txt after
# fp8rl_report is defined). uPlot comes from the npm package that scripts/setup.sh installs into
# third_party/uplot; the page's own script and styles are src/report/report_page.{js,css}.
set(FP8RL_UPLOT_DIST ${CMAKE_SOURCE_DIR}/third_party/uplot/node_modules/uplot/dist CACHE PATH
  "the dist/ folder of the npm package uplot")
set(report_assets_cc ${CMAKE_BINARY_DIR}/generated/report_assets.cc)
set(report_assets_inputs
  ${FP8RL_UPLOT_DIST}/uPlot.iife.min.js ${FP8RL_UPLOT_DIST}/uPlot.min.css ${FP8RL_UPLOT_DIST}/../LICENSE
  ${CMAKE_SOURCE_DIR}/src/report/report_page.js ${CMAKE_SOURCE_DIR}/src/report/report_page.css)
set(report_assets_command ${CMAKE_COMMAND} -DOUTPUT=${report_assets_cc}
  -DUPLOT_JS=${FP8RL_UPLOT_DIST}/uPlot.iife.min.js -DUPLOT_CSS=${FP8RL_UPLOT_DIST}/uPlot.min.css
  -DUPLOT_LICENSE=${FP8RL_UPLOT_DIST}/../LICENSE
  -DPAGE_JS=${CMAKE_SOURCE_DIR}/src/report/report_page.js -DPAGE_CSS=${CMAKE_SOURCE_DIR}/src/report/report_page.css
  -P ${CMAKE_SOURCE_DIR}/src/report/embed_assets.cmake)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/generated)

if(EXISTS ${FP8RL_UPLOT_DIST}/uPlot.iife.min.js AND EXISTS ${FP8RL_UPLOT_DIST}/uPlot.min.css)
  add_custom_command(OUTPUT ${report_assets_cc} COMMAND ${report_assets_command}
    DEPENDS ${report_assets_inputs} ${CMAKE_SOURCE_DIR}/src/report/embed_assets.cmake VERBATIM)
else()
  # Without uPlot the file is regenerated on every build (rewritten only if changed), so that the
  # next build after scripts/setup.sh picks the package up without reconfiguring.
  message(WARNING "uPlot not found in ${FP8RL_UPLOT_DIST}: `fp8rl report` will refuse to run "
                  "until scripts/setup.sh installs it (the next build then embeds it)")
  add_custom_target(fp8rl_report_assets COMMAND ${report_assets_command} BYPRODUCTS ${report_assets_cc} VERBATIM)
  add_dependencies(fp8rl_report fp8rl_report_assets)
endif()
target_sources(fp8rl_report PRIVATE ${report_assets_cc})
