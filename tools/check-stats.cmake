# ctest tool_stats: `sdpa stats --n 8 --dk 16,64,256 --seeds 200 --csv`,
# the experiment of the blog post "چطور توجه کار می‌کند: جذر d_k و هزینه‌ی
# n×n" ("How attention works: the square root of d_k and the cost of n×n",
# Persian, read 27 September 2026), checked against ranges derived from the
# spreads of a 1000-seed run (per-seed sd of the mean row entropy: 0.16,
# 0.12, 0.09 unscaled at dk = 16, 64, 256 and 0.08 scaled; of the max
# weight 0.033, 0.005, 0.0001 unscaled and 0.11 scaled): each range is the
# 1000-seed mean (docs/TOOL.md: unscaled entropy 0.67 / 0.32 / 0.15
# nats, scaled 1.72) +- about 10 standard errors of a 200-seed mean. The
# RMS logit must be within 10 % of sqrt(dk) unscaled and of 1 scaled.
# The CSV prints 6 decimals; the checks run on integers in millionths.
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND ${TOOL} stats --n 8 --dk 16,64,256 --seeds 200 --csv
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sdpa stats: exit status ${rc}: ${err}")
endif()
message(STATUS "sdpa stats --n 8 --dk 16,64,256 --seeds 200 --csv:\n${out}")
string(REPLACE "\n" ";" lines "${out}")
list(POP_BACK lines _empty) # the text ends with a newline
list(POP_FRONT lines header)
if(NOT header STREQUAL "dk,scaled,seeds,max_weight_mean,max_weight_sd,entropy_mean,entropy_sd,entropy_share,rms_logit")
  message(FATAL_ERROR "unexpected CSV header: ${header}")
endif()

# expected ranges, millionths: dk scaled  max_weight lo hi  entropy lo hi
set(expect
  "16 0   950000 1000000    550000  800000"
  "16 1   500000  630000   1600000 1850000"
  "64 0   990000 1000000    250000  400000"
  "64 1   500000  630000   1600000 1850000"
  "256 0  999000 1000000    100000  200000"
  "256 1  500000  630000   1600000 1850000")
set(sqrt_dk_16 4000000)
set(sqrt_dk_64 8000000)
set(sqrt_dk_256 16000000)

function(micro value out)
  if(NOT value MATCHES "^[0-9]+\\.[0-9][0-9][0-9][0-9][0-9][0-9]$")
    message(FATAL_ERROR "not a number with 6 decimals: '${value}'")
  endif()
  string(REPLACE "." "" digits "${value}")
  math(EXPR digits "${digits}") # drops the leading zeros (decimal)
  set(${out} ${digits} PARENT_SCOPE)
endfunction()

function(in_range what value lo hi)
  if(value LESS lo OR value GREATER hi)
    message(FATAL_ERROR "${what} = ${value} millionths, outside [${lo}, ${hi}]")
  endif()
endfunction()

list(LENGTH lines nrows)
if(NOT nrows EQUAL 6)
  message(FATAL_ERROR "expected 6 rows (3 dk x 2 scalings), got ${nrows}")
endif()
foreach(i RANGE 0 5)
  list(GET lines ${i} row)
  list(GET expect ${i} e)
  string(REGEX REPLACE " +" ";" e "${e}")
  string(REPLACE "," ";" f "${row}")
  list(LENGTH f nf)
  if(NOT nf EQUAL 9)
    message(FATAL_ERROR "row '${row}': expected 9 fields")
  endif()
  list(GET f 0 dk)
  list(GET f 1 scaled)
  list(GET f 2 seeds)
  list(GET e 0 want_dk)
  list(GET e 1 want_scaled)
  if(NOT dk EQUAL want_dk OR NOT scaled EQUAL want_scaled OR NOT seeds EQUAL 200)
    message(FATAL_ERROR "row '${row}': expected dk ${want_dk}, scaled ${want_scaled}, 200 seeds")
  endif()
  set(tag "dk ${dk} scaled ${scaled}")
  foreach(k 3 4 5 6 7 8)
    list(GET f ${k} v)
    micro(${v} m${k})
  endforeach()
  list(GET e 2 lo)
  list(GET e 3 hi)
  in_range("${tag}: max_weight_mean" ${m3} ${lo} ${hi})
  list(GET e 4 lo)
  list(GET e 5 hi)
  in_range("${tag}: entropy_mean" ${m5} ${lo} ${hi})
  # spreads: positive, and below the widest a distribution on [0, 1] or
  # [0, ln 8] allows
  in_range("${tag}: max_weight_sd" ${m4} 1 500000)
  in_range("${tag}: entropy_sd" ${m6} 1000 1040000)
  # share = entropy / ln 8 (ln 8 = 2.079442), to the rounding of 6 decimals
  math(EXPR back "${m7} * 2079442 / 1000000")
  math(EXPR lo "${m5} - 3")
  math(EXPR hi "${m5} + 3")
  in_range("${tag}: entropy_share * ln 8" ${back} ${lo} ${hi})
  # RMS logit within 10 % of sqrt(dk) unscaled, of 1 scaled
  if(scaled)
    set(want 1000000)
  else()
    set(want ${sqrt_dk_${dk}})
  endif()
  math(EXPR lo "${want} * 9 / 10")
  math(EXPR hi "${want} * 11 / 10")
  in_range("${tag}: rms_logit" ${m8} ${lo} ${hi})
  if(NOT scaled)
    set(unscaled_entropy_${dk} ${m5})
  endif()
endforeach()
# the trend the blog post reports: unscaled, the entropy falls as dk grows
if(NOT unscaled_entropy_16 GREATER unscaled_entropy_64 OR
   NOT unscaled_entropy_64 GREATER unscaled_entropy_256)
  message(FATAL_ERROR "unscaled entropy does not fall with dk: "
    "${unscaled_entropy_16}, ${unscaled_entropy_64}, ${unscaled_entropy_256}")
endif()
