# The reproduction pipeline lives in workflow/; this file makes `snakemake` work from the repository root.
include: "workflow/Snakefile"


# An included file never sets the default target (snakemake keeps the main file's), so name it here.
rule default:
    default_target: True
    input:
        rules.all.input,
