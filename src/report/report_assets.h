// The text assets of an `fp8rl report` page, compiled into the binary at build time
// (src/report/embed_assets.cmake writes their definitions): uPlot's minified script, style sheet
// and license (the npm package `uplot`, which scripts/setup.sh installs into third_party/uplot), and the
// page's own script and styles (src/report/report_page.js, report_page.css).
#pragma once

#include <string_view>

namespace fp8rl::report {

std::string_view uplot_js();       // "" if uPlot was not installed when fp8rl was built
std::string_view uplot_css();      // "" likewise
std::string_view uplot_license();  // its MIT license text, quoted in every page
std::string_view page_js();
std::string_view page_css();

}  // namespace fp8rl::report
