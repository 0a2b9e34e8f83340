"""Reports: tables, statistics and figures from run directories and analyses."""
