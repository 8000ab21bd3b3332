-- Stream the (key, required) rows of a composed statement (a kind's or a collection's keys) as CSV.
COPY ({statement}) TO STDOUT (FORMAT csv)
