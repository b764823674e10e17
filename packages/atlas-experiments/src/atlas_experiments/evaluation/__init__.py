"""`atlas eval`: perplexity, lm-eval, S-NIAH, BABILong-style QA, MQAR, MAD and the learnability study."""
