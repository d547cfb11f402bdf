# R survey side by side with tablesafe (tests/rsurvey.py writes the inputs and reads the output).
#
# Usage: Rscript svy_compare.R DATA.csv CELLS.csv OUT.csv WEIGHT SCALE
#
# The design is the replicate weights tablesafe uses (columns RW1 .. RWR of DATA.csv), with
# variance SCALE * sum_r (theta_r - theta)^2: svrepdesign(type = "other", scale, rscales = 1,
# mse = TRUE), so that both compute the same definition. Each row of CELLS.csv names one
# estimate: a cell (d1, c1, d2, c2, d3, c3: a dimension and its code, empty for its total),
# its kind (total, mean, percent, quantile), its variable, its quantile p, and for a
# percentage the dimensions its denominator totals over (over, separated by ";").
# Quantiles: svyquantile with qrule "math" (Hyndman and Fan's first, with weights), Woodruff's
# interval (interval.type "mean") with a normal quantile (df = Inf), and its se.
suppressPackageStartupMessages(library(survey))
args <- commandArgs(trailingOnly = TRUE)
data <- read.csv(args[1], stringsAsFactors = FALSE)
cells <- read.csv(args[2], colClasses = "character", na.strings = character(0))
weight <- args[4]
scale <- as.numeric(args[5])
reps <- grep("^RW[0-9]+$", names(data))
design <- svrepdesign(
  data = data, repweights = data[, reps], weights = data[[weight]], type = "other",
  scale = scale, rscales = 1, mse = TRUE, combined.weights = TRUE
)

inside <- function(row, drop = character(0)) {
  keep <- rep(TRUE, nrow(data))
  for (i in 1:3) {
    d <- row[[paste0("d", i)]]
    code <- row[[paste0("c", i)]]
    if (d != "" && code != "" && !(d %in% drop)) keep <- keep & as.character(data[[d]]) == code
  }
  keep
}

one <- function(row) {
  keep <- inside(row)
  if (row$kind == "total") {
    est <- svytotal(~ind, update(design, ind = as.numeric(keep)))
    return(c(coef(est), SE(est)))
  }
  if (row$kind == "percent") {
    den <- inside(row, strsplit(row$over, ";")[[1]])
    est <- svyratio(~num, ~den, update(design, num = as.numeric(keep), den = as.numeric(den)))
    return(100 * c(coef(est), SE(est)))
  }
  has <- keep & !is.na(data[[row$var]])
  sub <- design[has, ]
  f <- as.formula(paste0("~", row$var))
  if (row$kind == "mean") {
    est <- svymean(f, sub)
    return(c(coef(est), SE(est)))
  }
  q <- svyquantile(f, sub, as.numeric(row$p), interval.type = "mean", df = Inf, qrule = "math",
                   ci = TRUE, se = TRUE)[[1]]
  c(q[1, 1], q[1, 4])  # quantile, ci.2.5, ci.97.5, se.97.5
}

results <- t(sapply(seq_len(nrow(cells)), function(i) one(cells[i, ])))
out <- data.frame(id = cells$id, estimate = results[, 1], se = results[, 2])
write.csv(out, args[3], row.names = FALSE)
cat(R.version.string, "; survey", as.character(packageVersion("survey")), "\n")
