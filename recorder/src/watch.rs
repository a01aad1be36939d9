//! Variable watches: choosing the instructions and addresses to watch (being written).
